/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * Kernel types the ib_core probes read, declared by hand with only the
 * fields qp.c uses. preserve_access_index makes clang record every access as
 * a CO-RE relocation, which the loader resolves against the running kernel's
 * BTF (vmlinux and the ib_core module): struct ib_device and struct ib_qp
 * have different layouts on 6.1, 6.12 and 7.x, but these names and types do
 * not change. Field types must match the kernel's kind for kind (an enum
 * stays an enum of the same name), or the relocation is refused.
 *
 * No kernel or libbpf header is included: the scalar types and the few uapi
 * constants below are written out, so the object builds with nothing but
 * clang and libbpf's bpf_helpers.h.
 */
#ifndef RDMATOOL_IB_H
#define RDMATOOL_IB_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

typedef _Bool bool;
#define true 1
#define false 0

/* include/uapi/linux/bpf.h: enum bpf_map_type and update flags. */
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_STACK_TRACE 7
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_MAP_TYPE_TASK_STORAGE 29
#define BPF_ANY 0
#define BPF_F_NO_PREALLOC 1
#define BPF_LOCAL_STORAGE_GET_F_CREATE 1
/* Ring buffer submit flags and query values, from the same header. */
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0
#define BPF_RB_RING_SIZE 1

/* include/linux/err.h: a pointer in the last page is a negative errno. */
#define MAX_ERRNO 4095
#define IS_ERR_VALUE(x) ((unsigned long)(void *)(x) >= (unsigned long)-MAX_ERRNO)

/* include/rdma/ib_verbs.h */
enum ib_qp_type {
	IB_QPT_XRC_TGT = 10,
};

enum ib_qp_state {
	IB_QPS_RESET = 0,
};

/* enum ib_qp_attr_mask */
#define IB_QP_STATE 1

enum ib_event_type {
	IB_EVENT_PORT_ACTIVE = 9,
	IB_EVENT_PORT_ERR = 10,
	IB_EVENT_LID_CHANGE = 11,
	IB_EVENT_PKEY_CHANGE = 12,
	IB_EVENT_SM_CHANGE = 13,
	IB_EVENT_CLIENT_REREGISTER = 17,
	IB_EVENT_GID_CHANGE = 18,
};

/* Only ever passed to helpers. */
struct task_struct;

/* include/linux/types.h, include/linux/refcount_types.h */
typedef struct {
	int counter;
} atomic_t;

typedef struct refcount_struct {
	atomic_t refs;
} refcount_t;

struct ib_device {
	char name[64]; /* IB_DEVICE_NAME_MAX; kept current by ib_device_rename */
	__u32 index;
	refcount_t refcount; /* 0 once unregistered */
} __attribute__((preserve_access_index));

/* include/rdma/restrack.h */
struct rdma_restrack_entry {
	const char *kern_name; /* the creating module, for kernel objects */
	__u32 id;              /* what netlink reports as the object's number */
} __attribute__((preserve_access_index));

struct ib_srq {
	struct rdma_restrack_entry res;
} __attribute__((preserve_access_index));

struct ib_qp {
	struct ib_device *device;
	struct ib_srq *srq;
	__u32 qp_num;
	enum ib_qp_type qp_type;
	struct rdma_restrack_entry res;
} __attribute__((preserve_access_index));

struct ib_qp_attr {
	enum ib_qp_state qp_state;
} __attribute__((preserve_access_index));

struct ib_pd {
	struct ib_device *device;
} __attribute__((preserve_access_index));

struct ib_event {
	struct ib_device *device;
	union {
		struct ib_qp *qp;
		__u32 port_num;
	} element;
	enum ib_event_type event;
} __attribute__((preserve_access_index));

/*
 * include/linux/mm_types.h, fs.h: what bpf_find_vma's callback reads of the
 * mapping that holds a library call's return address, the numbers
 * /proc/PID/maps prints for it (start, offset in pages, the file's device
 * and inode). vm_start sits in an anonymous union on 6.12 and later: CO-RE
 * finds it by name either way.
 */
typedef __u32 dev_t;

struct super_block {
	dev_t s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct vm_area_struct {
	unsigned long vm_start;
	unsigned long vm_pgoff;
	struct file *vm_file;
} __attribute__((preserve_access_index));

/* include/uapi/linux/bpf.h: a helper the loader checks the kernel has. */
enum bpf_func_id {
	BPF_FUNC_find_vma = 180,
};

/*
 * Registers at a kprobe or uprobe (the uapi layout of bpf_user_pt_regs_t,
 * which is the context of both): the first arguments, the return value, the
 * stack pointer and, on arm64, the link register. Kprobe fallbacks read the
 * arguments (fentry programs get typed ones); the uprobes on the verbs
 * libraries read where the call returns to: [sp] on x86, which the call
 * instruction pushed, and the link register on arm64 (KP_LR), both before
 * the function's first instruction has run.
 */
#if defined(__TARGET_ARCH_x86)
struct kprobe_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
#define KP_ARG1(r) ((r)->di)
#define KP_ARG2(r) ((r)->si)
#define KP_ARG3(r) ((r)->dx)
#define KP_ARG4(r) ((r)->cx)
#define KP_RET(r) ((r)->ax)
#define KP_SP(r) ((r)->sp)
#elif defined(__TARGET_ARCH_arm64)
struct kprobe_regs {
	unsigned long regs[31];
	unsigned long sp, pc, pstate;
};
#define KP_ARG1(r) ((r)->regs[0])
#define KP_ARG2(r) ((r)->regs[1])
#define KP_ARG3(r) ((r)->regs[2])
#define KP_ARG4(r) ((r)->regs[3])
#define KP_RET(r) ((r)->regs[0])
#define KP_SP(r) ((r)->sp)
#define KP_LR(r) ((r)->regs[30])
#else
#error "qp.c: build with bpf2go -target amd64 or arm64 (kprobes read registers)"
#endif

#endif /* RDMATOOL_IB_H */
