// Package procmaps parses the lines of /proc/PID/maps as the kernel writes
// them (show_map_vma in fs/proc/task_mmu.c):
//
//	start-end perms offset major:minor inode [path]
//
// for symbolize, which finds the mapping that holds an address, and bpf,
// which finds the verbs libraries a process maps. prometheus/procfs parses
// maps too, but allocates each line's fields as strings and reads the
// whole file for one address; these parsers allocate nothing but the path.
package procmaps
