// Package bpf traces the queue pair lifecycle on ib_core with eBPF: QP
// create, modify and destroy, async QP events (LAST_WQE_REACHED among them),
// device events, registration, unregistration and renames, and drains.
// Programs are C (qp.c) compiled by bpf2go (github.com/cilium/ebpf) with
// CO-RE, so one object runs on every kernel of the lab matrix (6.1, 6.12,
// 7.x) although struct ib_device and struct ib_qp differ between them; the
// generated objects are committed, and `go generate ./bpf` reproduces them
// with Debian's clang-14. It does not read netlink: callers join what it
// sees with rdmanl's snapshots.
//
// # Probes
//
// Each traced function gets fentry/fexit programs (a BPF trampoline) where
// the kernel allows it, kprobe/kretprobe otherwise, chosen per function at
// Open by trying (Options.Kprobes forces kprobes); Tracer.Probes and
// Tracer.Mode report the outcome. Kprobes are attached one by one (Debian's
// 6.1 has no kprobe_multi).
//
//   - ib_create_qp_user, ib_create_qp_kernel (return; with kprobes, the
//     entry as well): the new QP, its device, number, type and SRQ (with
//     the SRQ's restrack number), the calling task, and for kernel QPs the
//     creating module (restrack kern_name: "ib_core" for the GSI QP of a
//     new device). A create the provider refused (max_qp reached, a queue
//     larger than max_qp_wr) is recorded too, with the errno as Result and
//     the device and the creating module from the arguments (not the
//     requested type: Type is 0 there); checks that uverbs makes before calling ib_create_qp_user
//     (a bad PD handle) fail before any probe sees them.
//   - _ib_modify_qp (entry and return): every kernel and user modify; the
//     new state when the mask has IB_QP_STATE, and the result.
//   - ib_destroy_qp_user: the QP's fields at entry (it is freed before the
//     return), the result at return.
//   - __ib_qp_event_handler (6.11+; every non-XRC QP, kernel QPs included),
//     else ib_uverbs_qp_event_handler (user QPs of any provider), and
//     __ib_shared_qp_event_handler (XRC targets): async QP events.
//     ib_uverbs_async_handler is not probed: GCC split it into a .part clone
//     that probes miss.
//   - ib_dispatch_event: device and port events; ib_register_device
//     (return), __ib_unregister_device, ib_device_rename.
//   - ib_drain_qp, ib_drain_rq: entry and return with the time taken (a
//     60 s drain from 6.11 on means the SRQ drain waited in vain for
//     LAST_WQE_REACHED). Under fentry/fexit a drain's return is lost when
//     any program attaches to or detaches from the function while the drain
//     sleeps: the kernel then patches the old trampoline to skip its fexit
//     programs (bpf_tramp_image_put). Kprobes (Options.Kprobes) see it.
//   - rdma_restrack_add, rdma_restrack_del, rdma_restrack_begin_del,
//     rdma_restrack_abort_del (return): every resource a device lists (QP,
//     CQ, PD, MR, SRQ, context, rdma_cm ID, counter) added, removed or put
//     back, counted without a record (Tracer.ResourceChanges).
//
// A function a kernel lacks is skipped (logged at Debug, reported by
// Probes); ib_uverbs_qp_event_handler exists only while ib_uverbs is
// loaded. Before 6.11 the async events of kernel QPs are not seen.
//
// Modify, destroy and rename events carry the time the call began but are
// written when it returns, so an async event raised during the call can come
// first in the stream: order by Event.Time. Device names are read from the
// kernel at each event, so they follow renames.
//
// # Creation sites
//
// With Options.Sites, a create records where it was made. A kernel QP's
// record names its kernel stack (at most 32 frames, read once per distinct
// stack from a BPF stack map: see Stack maps below) and Event.Stack has its
// return addresses. bpf_get_stackid serves fexit and kretprobe programs alike on
// every kernel of the matrix, and a stack id keeps the record small; under
// fexit the first frames are the BPF program's and its trampoline's.
//
// For a user QP, uprobes on the QP-creating functions of libibverbs
// (ibv_create_qp, both symbol versions) and librdmacm (rdma_create_qp,
// rdma_create_qp_ex, rdma_create_ep) record, per thread, the return address
// of the outermost such call in progress ([sp] at entry on x86, the link
// register on arm64) and its function, through the uprobe's BPF cookie
// (kernel 5.15+); the matching uretprobes end it. ib_create_qp_user runs in
// that thread inside the call and copies them into its record:
// Event.Via and Event.ViaReturn, which symbolize.User.CallSite turns into
// the application's call site, also in binaries without frame pointers.
// The entry also reads, with bpf_find_vma, the mapping that holds the
// return address (Event.ViaMapping: start, file offset, device, inode, as
// /proc/PID/maps shows them), so that the reader need not look in /proc
// for each create; it has none when another thread of the process holds
// its mmap lock at that moment. A
// call through rdma_create_qp keeps rdma_create_qp's caller, not
// librdmacm's own call of ibv_create_qp. ibv_create_qp_ex is a static
// inline function of verbs.h: it calls ibv_create_qp when it asks for
// nothing more (that create has a site), the provider directly otherwise
// (no site); so do direct provider calls (mlx5dv_create_qp). A call the
// application leaves by longjmp keeps its thread's state until a call from
// as high on the stack begins.
//
// The outermost call's entry also stores the thread's user stack in the
// stack map (bpf_get_stackid with BPF_F_USER_STACK), which the kernel
// walks through frame pointers: the library function, then the return
// addresses of the frames above the one that made the call. The record
// carries its id; Event.UserStack has those frames. They are right in
// programs built with frame pointers and cut short or wrong in others
// (Debian's own binaries have none); watch.Sites names them up to the
// first that lies in no file of the process.
//
// # Stack maps
//
// Stacks are stored in two BPF stack maps of 1024 stacks each
// (Options.StackEntries makes them smaller), which take turns
// (generations): the probes store into the current one, named by a
// one-element array map (stack_gen), and each record says which map its
// stack is in. A stack whose hash bucket holds another is not stored (the
// record then has no stack) and is counted (Tracer.StackStats.Refused).
// Nothing in a map is ever deleted by the probes, and with ASLR every new
// process brings new user stacks, so Events flips the generation every
// Options.StackPeriod (30 s) once the current map holds stacks, after
// emptying the map it flips to and forgetting what it read from it: the
// maps hold only what the last two periods stored, and a host that starts
// thousands of RDMA processes keeps its stacks, as long as fewer new
// stacks than the map holds come in a period. A stack is read by Events
// a period or more before its map is emptied; one that is not (a record
// older than the emptying, or a library call that outlived a whole period
// before its create) is left out rather than read wrong. StackStats says
// how many stacks the maps hold and can hold.
//
// Uprobes attach to files (inodes), not processes. Open attaches them to
// the host's own libibverbs and librdmacm (the library directories under
// /proc/1/root and /) and to those every process maps (/proc/PID/maps),
// each file once, by the device and inode maps shows. A library file is
// opened through /proc/PID/map_files (the mapped file itself, also in
// another mount namespace, under a chroot or deleted since) and else
// through /proc/PID/root, so a container's own copy gets its own uprobes.
// When Events sees a user QP create without a site from a process not
// scanned yet, it attaches the libraries that process maps: the process's
// first create through its own copy of a library has no site, its later
// ones have. Tracer.AttachLibraries does the same for a caller that learns
// of a process sooner. A library statically linked into an application is
// not found.
//
// Uprobes refused (no uprobe support, lockdown) or a library that cannot
// be read or probed do not fail Open: creates then have no site, and
// Tracer.Sites says why (its first failure, logged at Warn once). Each
// call of a probed function, in any process that maps a probed library,
// takes two traps into the kernel (entry and return) while the Tracer is
// open.
//
// # Delivery
//
// Records go through one ring buffer (4 MiB by default). While records
// come, the programs wake the reader only when it is a sixteenth full and
// Events polls every 100 ms, so an event reaches the caller within about
// 100 ms. A poll that finds the ring empty sets a flag (the reader_waits
// map) and Events waits: the next record wakes it at once, and an idle
// reader makes no system call but a wait that ends every 5 s. A record that
// does not fit is dropped and counted, as are probe runs the kernel skipped
// and returns seen without their entry: Stats reports them, Events logs them
// at Warn, nothing is lost silently.
//
// On a fully preemptible kernel (Debian's 7.x: PREEMPT_LAZY) a task can be
// preempted inside an fentry program; another task that reaches the same
// function on that CPU meanwhile is not traced (the kernel's recursion
// guard, counted in Stats.Missed). Under the lab's heaviest churn that is a
// few in 10,000 events. Kprobe programs run with preemption off and do not
// miss this way: Options.Kprobes trades overhead for them.
//
// # JSON
//
// EventJSON is an event as the object `rdmatool trace -j` prints per line;
// its json tags are that schema. Event.AppendJSON writes it, the same bytes
// as encoding/json, without reflection or allocation. The creation site
// fields trace adds to a qp_create line are its own (symbolized there):
// Event.Via, ViaReturn and Stack are not in EventJSON.
//
// # Privileges
//
// Loading needs CAP_BPF and CAP_PERFMON (or root) and kernel BTF for
// vmlinux and ib_core (/sys/kernel/btf). Without them Open returns an error
// that says which is missing, wrapping ErrNoPrivilege, ErrNoBTF or
// ErrNoIBCore, and callers fall back to netlink only. fentry on a module
// also needs CAP_SYS_ADMIN to open the module's BTF object; without it the
// probes fall back to kprobes (logged at Warn). Open raises RLIMIT_MEMLOCK
// to infinity, which kernels before 5.11 charge BPF memory to; without
// CAP_SYS_RESOURCE that may fail, and only such kernels then refuse (an
// EPERM whose error names the limit). Linking the package makes no bpf()
// call: the first one is Open's. Creation sites also read other users'
// /proc/PID/maps and /proc/PID/root (CAP_SYS_PTRACE) and follow
// /proc/PID/map_files (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE; without it
// the root path is used).
//
// # Module references
//
// An attached fentry/fexit program holds a reference on the module it
// traces. While a Tracer in fentry mode is open, ib_core's reference count
// is raised (by about 17 in the lab) and `modprobe -r ib_core` fails even
// when nothing else uses it: the kernel refuses with EWOULDBLOCK, which
// kmod's modprobe reports as "Module ib_core is in use" (busybox: "Resource
// temporarily unavailable"). Close drops the references. Kprobes do not pin:
// with Options.Kprobes, ib_core can be unloaded under a running Tracer,
// whose probes then stop firing (measured in the lab on 6.12). Nothing is
// pinned in bpffs; Close, or the process's exit, removes every program,
// link and map, uprobes included.
package bpf
