// Package symbolize turns addresses that eBPF probes see into sites: for a
// user address, the mapped file, its GNU build ID, the file offset and the
// function symbol holding it ("qpwork!leak_qps+0x4c"); for a kernel
// address, the function and module ("nvmet_rdma_create_queue_ib+0x1f0
// [nvmet_rdma]"). A stripped file still gives its path, build ID and
// offset, which addr2line or debuginfod take later.
//
// # User addresses
//
// User.Site and User.CallSite take a pid and an address in that process,
// live: the mapping is found in /proc/PID/maps, and the file opened through
// /proc/PID/map_files/START-END (the mapped file itself: in another mount
// namespace, under a chroot, deleted or replaced since), else through
// /proc/PID/root and the path maps shows, which is right for a process in
// its own mount namespace: its paths are its own, and it resolves its own
// copy of the file. The file offset is the mapping's offset plus the
// address's distance from the mapping's start; the ELF's PT_LOAD program
// headers turn it into the link-time address the symbols use, the same way
// for PIE and fixed-address executables and for shared libraries. Symbols
// are the sized function symbols of .symtab, else of .dynsym (the nearest
// one before the address where sizes are 0). CallSite takes a return
// address (what a uprobe reads on entry) and names the call instruction
// before it.
//
// Parsing is debug/elf's; what is read by hand (maps lines, build ID notes,
// x86 call instructions before a return address, kallsyms) is fuzzed.
// Parsed files are cached by build ID, with their symbol table sizes and
// segments (a stripped or patched copy keeps the build ID), or by device,
// inode, size and mtime when there is no build ID: at most 32 files, the
// least recently used going first, each with its resolved sites, since many
// QPs share one site. A file that is not ELF is remembered as such. A
// mapping whose file was found through map_files is remembered per process
// and used again while its map_files entry names the same file, so a site
// served from the cache costs a stat and no read of maps (which grows with
// the process's mappings). CallSite takes what the probe saw of the
// mapping (bpf_find_vma at the call): when it is the remembered one, the
// site costs no system call at all.
//
// # Kernel addresses
//
// Kernel reads /proc/kallsyms once and again when /proc/modules changes
// (Refresh, also tried before giving up on an address). Module text is
// bounded by the module's range in /proc/modules. Kernel.Frame takes a
// return address from a kernel stack and names the calling function as the
// kernel's stack traces do.
//
// # Errors
//
// Nothing here panics on what a process or the kernel shows. A process
// gone, an address in no mapping, a mapping with no file (anonymous memory,
// JIT code), a file that cannot be opened or is not ELF: the Site holds
// what was found, and the error wraps ErrNoProcess, ErrNoMapping,
// ErrNoFile, ErrFileReplaced or the cause from the file system. kallsyms
// with hidden addresses is ErrRestricted, not wrong symbols.
//
// # Privileges
//
// Reading another user's /proc/PID/maps and /proc/PID/root needs
// CAP_SYS_PTRACE (ptrace read access); following /proc/PID/map_files needs
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE (without it the root path is
// used: a file deleted since it was mapped is then ErrFileReplaced).
// kallsyms shows addresses to CAP_SYSLOG under kernel.kptr_restrict=1.
//
// The formats are the kernel's: maps in fs/proc/task_mmu.c, map_files in
// fs/proc/base.c, kallsyms in kernel/kallsyms.c, modules in
// kernel/module/procfs.c; build ID notes are elf.h's NT_GNU_BUILD_ID.
package symbolize
