//go:build ignore

/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * Probes on the queue pair lifecycle in ib_core. Each traced kernel function
 * has an fentry/fexit variant and a kprobe/kretprobe variant; the loader
 * (tracer_linux.go) attaches one of them per function and never both. Every
 * record is a struct qp_event in the ring buffer "events"; bpf/record.go
 * decodes it at fixed offsets, so the layout below is an ABI: change both or
 * neither (TestRecordLayout checks them against each other).
 *
 * Creation sites: uprobes on the QP-creating functions of libibverbs and
 * librdmacm (sites.go attaches them, with a cookie naming the function)
 * remember, per thread, where the application's outermost call to them
 * returns to; a user QP create in ib_core, which runs in that thread inside
 * the call, copies it into its record. A kernel QP create records the
 * kernel stack's id in a stack map: "stacks0" or "stacks1", the generation
 * the reader has the programs write now (stack_gen, below).
 */

#include "ib.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* GPL-compatible: bpf_probe_read_kernel and the ring buffer need it. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Record kinds: bpf.Kind in event.go. */
enum kind {
	KIND_QP_CREATE = 1,
	KIND_QP_MODIFY = 2,
	KIND_QP_DESTROY = 3,
	KIND_QP_EVENT = 4,
	KIND_DEVICE_EVENT = 5,
	KIND_DEVICE_REGISTER = 6,
	KIND_DEVICE_UNREGISTER = 7,
	KIND_DEVICE_RENAME = 8,
	KIND_DRAIN_START = 9,
	KIND_DRAIN_END = 10,
};

/* Which function recorded the event: probeFunctions in probes.go. */
enum probe {
	PROBE_CREATE_QP_USER = 1,
	PROBE_CREATE_QP_KERNEL = 2,
	PROBE_MODIFY_QP = 3,
	PROBE_DESTROY_QP_USER = 4,
	PROBE_UVERBS_QP_EVENT = 5,
	PROBE_QP_EVENT = 6,
	PROBE_SHARED_QP_EVENT = 7,
	PROBE_DISPATCH_EVENT = 8,
	PROBE_REGISTER_DEVICE = 9,
	PROBE_UNREGISTER_DEVICE = 10,
	PROBE_DEVICE_RENAME = 11,
	PROBE_DRAIN_QP = 12,
	PROBE_DRAIN_RQ = 13,
	PROBE_MODIFY_QP_IS_OK = 14,
};

#define FLAG_ON_SRQ (1 << 0)
#define FLAG_HAS_STATE (1 << 1)
#define FLAG_USER_SITE (1 << 2) /* user_ret and user_fn are set */
#define FLAG_KSTACK (1 << 3)    /* kstack_id is set */
#define FLAG_USTACK (1 << 4)    /* kstack_id is the user stack of the library call */
#define FLAG_CUR_STATE (1 << 5) /* modify: cur_state is the provider's state when it began */
#define FLAG_STACK_GEN1 (1 << 6) /* kstack_id is in "stacks1" (else in "stacks0") */
#define FLAG_USER_VMA (1 << 7)   /* QP create, FLAG_USER_SITE: vma is user_ret's mapping */

/* bpf_get_stackid's flag for the user stack (include/uapi/linux/bpf.h). */
#define BPF_F_USER_STACK (1ULL << 8)

/* The library functions the uprobes name by their cookie: libFuncs in sites.go. */
enum lib_fn {
	FN_IBV_CREATE_QP = 1,
	FN_RDMA_CREATE_QP = 2,
	FN_RDMA_CREATE_QP_EX = 3,
	FN_RDMA_CREATE_EP = 4,
};

/* Counter slots in the per-CPU array "counters": Stats in tracer_linux.go. */
#define COUNTER_LOST 0      /* ring buffer full: record dropped */
#define COUNTER_UNMATCHED 1 /* a return without its entry: record dropped */
#define COUNTER_RESTRACK 2  /* rdma_restrack_add, _del, _begin_del, _abort_del returned */
#define COUNTER_STACKS_REFUSED 3 /* bpf_get_stackid failed: the stack is not stored */
#define COUNTER_SLOTS 4

/*
 * The mapping that held a library call's return address when the call
 * began, as /proc/PID/maps shows it: the reader trusts a mapping of the
 * process it found before when these match, without a look in /proc.
 */
struct user_vma {
	__u64 start;
	__u64 pgoff; /* in pages */
	__u64 ino;
	__u32 dev;   /* the kernel's dev_t: major << 20 | minor */
	__u32 pad;
};

struct qp_event {
	__u64 ts_ns; /*   0: bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	union {
		__u64 duration_ns; /*   8: drain end: time since the drain began */
		__u64 user_ret;    /*   8: QP create, FLAG_USER_SITE: where the library call returns */
	};
	__u8 kind;         /*  16 */
	__u8 probe;        /*  17 */
	__u8 qp_type;      /*  18 */
	__u8 flags;        /*  19: FLAG_* */
	__u32 dev_index;   /*  20 */
	__u32 qpn;         /*  24 */
	__u32 srqn;        /*  28 */
	__s32 result;      /*  32: return value, 0 or -errno */
	__u32 pid;         /*  36: tgid */
	__u32 tid;         /*  40 */
	__u32 ib_event;    /*  44 */
	union {
		__u32 port;      /*  48: device events */
		__s32 kstack_id; /*  48: QP create, FLAG_KSTACK or FLAG_USTACK: the stack's id (FLAG_STACK_GEN1) */
	};
	__u8 new_state;    /*  52 */
	__u8 user_fn;      /*  53: QP create, FLAG_USER_SITE: enum lib_fn */
	__u8 cur_state;    /*  54: modify, FLAG_CUR_STATE */
	__u8 pad;          /*  55 */
	char comm[16];     /*  56 */
	char dev_name[64]; /*  72 */
	union {
		char str[64];      /* 136: kernel owner (create) or new name (rename) */
		struct user_vma vma; /* 136: user QP create, FLAG_USER_VMA */
	};
};                         /* 200 */

/*
 * Calls in progress, keyed by task and probe. Most returns need only the
 * time of the entry and, for kprobes (which see no arguments at return), an
 * argument or two: struct call. Destroy and rename need fields that are gone
 * or changed at return, so their entry stashes the whole record.
 */
struct call_key {
	__u64 pid_tgid;
	__u32 probe;
	__u32 pad;
};

struct call {
	__u64 ts_ns;
	__u64 arg0;
	__u64 arg1;
	__u64 arg2;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); /* Options.BufferBytes overrides it */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/*
 * Whether the reader waits to be woken (1) rather than polling (0): set
 * by the reader (Events) when a poll found the ring empty, cleared when it
 * reads again. Then the next record wakes it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} reader_waits SEC(".maps");

/* LRU: an entry whose return never came (attached mid-call) ages out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct call_key);
	__type(value, struct call);
} calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct call_key);
	__type(value, struct qp_event);
} pending SEC(".maps");

/*
 * fentry/fexit programs keep their calls in progress in task storage, which
 * costs a fraction of a hash update per call: a slot per function, and two
 * for destroy, because destroying an XRC QP destroys its target QP inside.
 * A destroy slot belongs to the QP it records (fexit has the same argument),
 * so a return the kernel skipped leaves one stale slot, not a miscount that
 * would lose every later destroy of the task.
 */
struct task_calls {
	__u64 modify_ts;
	__u64 modify_cur;     /* the provider's state as ib_modify_qp_is_ok saw it, plus 1; 0: not seen */
	__u64 drain_ts[2];    /* ib_drain_qp, ib_drain_rq */
	__u64 destroy_qp[2];  /* the QP each destroy slot records; 0: free */
	struct qp_event destroy[2];
	struct qp_event rename;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_calls);
} task_calls SEC(".maps");

/*
 * The outermost call in progress of a thread into a QP-creating library
 * function: where it returns to, the stack pointer at its entry, the
 * function (its uprobe's cookie) and how many such calls are nested in it
 * (rdma_create_qp calls ibv_create_qp). A return the uprobes missed (a
 * longjmp out of the library) leaves depth above 0: an entry from as high
 * on the stack or higher then sees from the stack pointer that the call is
 * over (one from deeper is taken for a nested call). LRU: a thread that
 * exits inside a call leaves an entry that ages out. ustack is the user
 * stack at the outermost entry (-1: none), as the frame pointers give it:
 * the library function, then the return addresses of the frames above the
 * call's own; ustack_flips is stack_gen's count when it was stored, which
 * says the map it is in (its low bit) and whether that map has been
 * emptied since (stack_stored).
 */
struct user_call {
	__u64 ret;
	__u64 sp;
	__u32 depth;
	__u32 fn;
	__s32 ustack;
	__u32 ustack_flips;
	__u32 has_vma;
	__u32 pad;
	struct user_vma vma; /* ret's mapping, when has_vma */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct user_call);
} user_calls SEC(".maps");

/*
 * Kernel stacks of kernel QP creates and user stacks of library calls, by
 * bpf_get_stackid: many creates share one stack, stored once. A stack whose
 * hash bucket holds another is not stored (no BPF_F_REUSE_STACKID: an id
 * the reader has yet to look up never changes its stack); its record has
 * no FLAG_KSTACK or FLAG_USTACK, and COUNTER_STACKS_REFUSED counts it.
 *
 * Nothing deletes a stack here, and with ASLR every process brings new
 * user stacks, so one map would fill for good. There are two, generations
 * of each other: programs store into the one stack_gen names (the low bit
 * of its count), and the reader flips stack_gen every period (Events,
 * Options.StackPeriod) once the current map holds stacks, after emptying
 * the map it flips to. That map was last written a whole period before; a
 * record of a stack in it was written and read since, unless the call that
 * stored it outlived the period (see stack_stored) or the record waited in
 * the ring as long (the reader drops the stacks of records older than the
 * emptying). So the maps hold only what the last two periods stored.
 */
#define STACK_DEPTH 32

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1024); /* 1 without Options.Sites */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACK_DEPTH * sizeof(__u64));
} stacks0 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1024); /* 1 without Options.Sites */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACK_DEPTH * sizeof(__u64));
} stacks1 SEC(".maps");

/* How many times the reader flipped the generation: its low bit is the map stored into. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stack_gen SEC(".maps");

/* Records in the ring before the reader is woken: set by the loader. */
const volatile __u64 wakeup_bytes = 1 << 18;

/* Whether kernel QP creates record their stack (not 0): Options.Sites. */
const volatile __u32 kernel_stacks = 0;

static __always_inline void count(__u32 slot)
{
	__u64 *n = bpf_map_lookup_elem(&counters, &slot);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* stack_flips returns stack_gen's count. */
static __always_inline __u32 stack_flips(void)
{
	__u32 zero = 0;
	__u32 *flips = bpf_map_lookup_elem(&stack_gen, &zero);

	return flips ? *flips : 0;
}

/*
 * store_stack stores the current stack (kernel, or user with
 * BPF_F_USER_STACK) in the current generation's map and returns its id, or
 * a negative errno (counted); *flips is stack_gen's count it went by. Two
 * calls, because the verifier wants a constant map in each.
 */
static __always_inline long store_stack(void *ctx, __u64 flags, __u32 *flips)
{
	long id;

	*flips = stack_flips();
	if (*flips & 1)
		id = bpf_get_stackid(ctx, &stacks1, flags);
	else
		id = bpf_get_stackid(ctx, &stacks0, flags);
	if (id < 0)
		count(COUNTER_STACKS_REFUSED);
	return id;
}

/*
 * READ reads a field. fentry/fexit programs get BTF-typed arguments and
 * load fields directly (with CO-RE offsets); kprobes get plain addresses and
 * go through bpf_probe_read_kernel. direct is a constant in every caller, so
 * only one branch is compiled into each program.
 */
#define READ(direct, p, ...) ((direct) ? (p)->__VA_ARGS__ : BPF_CORE_READ(p, __VA_ARGS__))

static __always_inline void fill_task(struct qp_event *e)
{
	__u64 id = bpf_get_current_pid_tgid();

	e->pid = id >> 32;
	e->tid = (__u32)id;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
}

static __always_inline void fill_dev(struct qp_event *e, struct ib_device *dev, bool direct)
{
	if (!dev)
		return;
	e->dev_index = READ(direct, dev, index);
	bpf_probe_read_kernel_str(&e->dev_name, sizeof(e->dev_name),
				  __builtin_preserve_access_index(&dev->name));
}

static __always_inline void fill_qp(struct qp_event *e, struct ib_qp *qp, bool direct)
{
	struct ib_srq *srq;
	const char *owner;

	if (!qp)
		return;
	fill_dev(e, READ(direct, qp, device), direct);
	e->qpn = READ(direct, qp, qp_num);
	e->qp_type = READ(direct, qp, qp_type);
	srq = READ(direct, qp, srq);
	if (srq) {
		e->flags |= FLAG_ON_SRQ;
		e->srqn = READ(direct, srq, res.id);
	}
	owner = READ(direct, qp, res.kern_name);
	if (owner)
		bpf_probe_read_kernel_str(&e->str, sizeof(e->str), owner);
}

/*
 * Waking the reader for every record would cost a wakeup per QP call under
 * churn. While records come the reader polls every 100 ms (Events), so they
 * are written without a wakeup unless the ring is filling up (wakeup_bytes,
 * a sixteenth of it): then the reader is woken at once. A reader that found
 * the ring empty waits to be woken (reader_waits): the next record wakes it.
 */
static __always_inline __u64 wakeup_flags(void)
{
	__u32 zero = 0;
	__u32 *waits = bpf_map_lookup_elem(&reader_waits, &zero);

	if ((waits && *waits) || bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void submit(struct qp_event *e)
{
	bpf_ringbuf_submit(e, wakeup_flags());
}

static __always_inline void clear(struct qp_event *e, __u8 kind, __u8 probe, __u64 ts)
{
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = ts;
	e->kind = kind;
	e->probe = probe;
}

/* reserve returns a zeroed record in the ring buffer, or NULL (counted). */
static __always_inline struct qp_event *reserve(__u8 kind, __u8 probe, __u64 ts)
{
	struct qp_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count(COUNTER_LOST);
		return NULL;
	}
	clear(e, kind, probe, ts);
	return e;
}

static __always_inline struct call_key key_of(__u8 probe)
{
	struct call_key k = {
		.pid_tgid = bpf_get_current_pid_tgid(),
		.probe = probe,
	};
	return k;
}

/* enter records the time of a call and up to three arguments. */
static __always_inline void enter(__u8 probe, __u64 arg0, __u64 arg1, __u64 arg2)
{
	struct call_key k = key_of(probe);
	struct call c = {.ts_ns = bpf_ktime_get_ns(), .arg0 = arg0, .arg1 = arg1, .arg2 = arg2};

	bpf_map_update_elem(&calls, &k, &c, BPF_ANY);
}

/* leave takes what enter recorded; false (counted) when there is none. */
static __always_inline bool leave(__u8 probe, struct call *c)
{
	struct call_key k = key_of(probe);
	struct call *p = bpf_map_lookup_elem(&calls, &k);

	if (!p) {
		count(COUNTER_UNMATCHED);
		return false;
	}
	*c = *p;
	bpf_map_delete_elem(&calls, &k);
	return true;
}

/* ---- What each function records, shared by both attach modes. ---- */

/*
 * The arguments of a QP create that a failed one is recorded with: the
 * device and, for a kernel QP, the creating module (not the requested
 * type: a CO-RE read of ib_qp_init_attr is refused by the relocation on
 * Debian's 6.12, whose vmlinux carries that struct). dev and owner may be
 * NULL (a kretprobe whose entry was not seen).
 * Failures are rare, so they are read through bpf_probe_read_kernel in
 * both attach modes.
 */
struct create_args {
	struct ib_device *dev;
	const char *owner;
};

/*
 * The creation site of a user QP: the outermost library call of this thread
 * in progress, if a uprobe saw it begin. Its user stack is left out when
 * the reader has flipped the generation twice since the call stored it
 * (the call outlived a whole period): its map has been emptied since, and
 * the id may name another stack now.
 */
static __always_inline void fill_user_site(struct qp_event *e)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct user_call *c = bpf_map_lookup_elem(&user_calls, &id);

	if (!c || !c->depth)
		return;
	e->user_ret = c->ret;
	e->user_fn = c->fn;
	e->flags |= FLAG_USER_SITE;
	if (c->has_vma && !e->str[0]) {
		e->vma = c->vma;
		e->flags |= FLAG_USER_VMA;
	}
	if (c->ustack >= 0 && stack_flips() - c->ustack_flips < 2) {
		e->kstack_id = c->ustack;
		e->flags |= FLAG_USTACK;
		if (c->ustack_flips & 1)
			e->flags |= FLAG_STACK_GEN1;
	}
}

/*
 * QP create returned qp (or an ERR_PTR). ctx is the program's context, for
 * the kernel stack of a kernel QP.
 */
static __always_inline void on_create(void *ctx, __u8 probe, struct ib_qp *qp, struct create_args a,
				      bool direct)
{
	struct qp_event *e = reserve(KIND_QP_CREATE, probe, bpf_ktime_get_ns());

	if (!e)
		return;
	fill_task(e);
	if (IS_ERR_VALUE(qp)) {
		e->result = (__s32)(long)qp;
		fill_dev(e, a.dev, false);
		if (a.owner)
			bpf_probe_read_kernel_str(&e->str, sizeof(e->str), a.owner);
	} else {
		fill_qp(e, qp, direct);
	}
	if (probe == PROBE_CREATE_QP_USER) {
		fill_user_site(e);
	} else if (kernel_stacks) {
		__u32 flips;
		long id = store_stack(ctx, 0, &flips);

		if (id >= 0) {
			e->kstack_id = id;
			e->flags |= FLAG_KSTACK;
			if (flips & 1)
				e->flags |= FLAG_STACK_GEN1;
		}
	}
	submit(e);
}

/*
 * Modify returned: the record carries the time of the call, so an async
 * event the call itself raised (rxe's LAST_WQE_REACHED after ERR) is later.
 */
static __always_inline void on_modify(__u64 ts, struct ib_qp *qp, struct ib_qp_attr *attr,
				      int mask, long ret, __u64 cur, bool direct)
{
	struct qp_event *e = reserve(KIND_QP_MODIFY, PROBE_MODIFY_QP, ts);

	if (!e)
		return;
	fill_task(e);
	fill_qp(e, qp, direct);
	if (mask & IB_QP_STATE) {
		e->flags |= FLAG_HAS_STATE;
		e->new_state = READ(direct, attr, qp_state);
	}
	if (cur) {
		e->flags |= FLAG_CUR_STATE;
		e->cur_state = cur - 1;
	}
	e->result = (__s32)ret;
	submit(e);
}

static __always_inline struct task_calls *task_calls_get(bool create)
{
	return bpf_task_storage_get(&task_calls, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* Finish a record kept in task storage with the call's result. */
static __always_inline void output(struct qp_event *e, long ret)
{
	e->result = (__s32)ret;
	if (bpf_ringbuf_output(&events, e, sizeof(*e), wakeup_flags()))
		count(COUNTER_LOST);
}

/* Entry of destroy: the QP is freed before the return, so read it now. */
static __always_inline void on_destroy_entry(struct ib_qp *qp, bool direct)
{
	struct call_key k = key_of(PROBE_DESTROY_QP_USER);
	struct qp_event e;

	clear(&e, KIND_QP_DESTROY, PROBE_DESTROY_QP_USER, bpf_ktime_get_ns());
	fill_task(&e);
	fill_qp(&e, qp, direct);
	bpf_map_update_elem(&pending, &k, &e, BPF_ANY);
}

/* Return of destroy and rename: the result completes the entry's record. */
static __always_inline void on_pending_return(__u8 probe, long ret)
{
	struct call_key k = key_of(probe);
	struct qp_event *p = bpf_map_lookup_elem(&pending, &k);

	if (!p) {
		count(COUNTER_UNMATCHED);
		return;
	}
	output(p, ret);
	bpf_map_delete_elem(&pending, &k);
}

static __always_inline void on_drain(__u8 kind, __u8 probe, struct ib_qp *qp, __u64 ts,
				     __u64 duration, bool direct)
{
	struct qp_event *e = reserve(kind, probe, ts);

	if (!e)
		return;
	fill_task(e);
	fill_qp(e, qp, direct);
	e->duration_ns = duration;
	submit(e);
}

/*
 * An async event for a QP: event->element.qp is the QP it is about. The
 * verifier types a load from the union element as its first member (a CQ
 * pointer), so event programs read through bpf_probe_read_kernel even under
 * fentry (direct is false); they are rare.
 */
static __always_inline void on_qp_event(__u8 probe, struct ib_event *event, bool direct)
{
	struct qp_event *e;
	struct ib_qp *qp = READ(direct, event, element.qp);

	if (!qp)
		return;
	/*
	 * ib_uverbs_qp_event_handler also runs for each user of an XRC target
	 * QP, after __ib_shared_qp_event_handler has recorded the event once.
	 */
	if (probe == PROBE_UVERBS_QP_EVENT && READ(direct, qp, qp_type) == IB_QPT_XRC_TGT)
		return;
	e = reserve(KIND_QP_EVENT, probe, bpf_ktime_get_ns());
	if (!e)
		return;
	fill_qp(e, qp, direct);
	e->ib_event = READ(direct, event, event);
	submit(e);
}

static __always_inline void on_dispatch_event(struct ib_event *event, bool direct)
{
	struct qp_event *e = reserve(KIND_DEVICE_EVENT, PROBE_DISPATCH_EVENT, bpf_ktime_get_ns());

	if (!e)
		return;
	fill_dev(e, READ(direct, event, device), direct);
	e->ib_event = READ(direct, event, event);
	switch (e->ib_event) {
	case IB_EVENT_PORT_ACTIVE:
	case IB_EVENT_PORT_ERR:
	case IB_EVENT_LID_CHANGE:
	case IB_EVENT_PKEY_CHANGE:
	case IB_EVENT_SM_CHANGE:
	case IB_EVENT_CLIENT_REREGISTER:
	case IB_EVENT_GID_CHANGE:
		e->port = READ(direct, event, element.port_num);
	}
	submit(e);
}

static __always_inline void on_register(struct ib_device *dev, long ret, bool direct)
{
	struct qp_event *e = reserve(KIND_DEVICE_REGISTER, PROBE_REGISTER_DEVICE, bpf_ktime_get_ns());

	if (!e)
		return;
	fill_task(e);
	fill_dev(e, dev, direct);
	e->result = (__s32)ret;
	submit(e);
}

static __always_inline void on_unregister(struct ib_device *dev, bool direct)
{
	struct qp_event *e;

	/* A device already unregistered (or never enabled) is left at once. */
	if (READ(direct, dev, refcount.refs.counter) == 0)
		return;
	e = reserve(KIND_DEVICE_UNREGISTER, PROBE_UNREGISTER_DEVICE, bpf_ktime_get_ns());
	if (!e)
		return;
	fill_task(e);
	fill_dev(e, dev, direct);
	submit(e);
}

/* Rename: the old name at entry, the result at return. */
static __always_inline void on_rename_entry(struct ib_device *dev, const char *name, bool direct)
{
	struct call_key k = key_of(PROBE_DEVICE_RENAME);
	struct qp_event e;

	clear(&e, KIND_DEVICE_RENAME, PROBE_DEVICE_RENAME, bpf_ktime_get_ns());
	fill_task(&e);
	fill_dev(&e, dev, direct);
	bpf_probe_read_kernel_str(&e.str, sizeof(e.str), name);
	bpf_map_update_elem(&pending, &k, &e, BPF_ANY);
}

/* ---- fentry / fexit: arguments are ctx[0..n-1], the return ctx[n]. ---- */

/* ib_create_qp_user(dev, pd, attr, udata, uobj, caller) */
SEC("fexit/ib_create_qp_user")
int fexit_create_qp_user(__u64 *ctx)
{
	struct create_args a = {.dev = (struct ib_device *)ctx[0]};

	on_create(ctx, PROBE_CREATE_QP_USER, (struct ib_qp *)ctx[6], a, true);
	return 0;
}

/* ib_create_qp_kernel(pd, attr, caller) */
SEC("fexit/ib_create_qp_kernel")
int fexit_create_qp_kernel(__u64 *ctx)
{
	struct ib_pd *pd = (struct ib_pd *)ctx[0];
	struct create_args a = {.dev = BPF_CORE_READ(pd, device), .owner = (const char *)ctx[2]};

	on_create(ctx, PROBE_CREATE_QP_KERNEL, (struct ib_qp *)ctx[3], a, true);
	return 0;
}

SEC("fentry/_ib_modify_qp")
int fentry_modify_qp(__u64 *ctx)
{
	struct task_calls *tc = task_calls_get(true);

	if (tc) {
		tc->modify_ts = bpf_ktime_get_ns();
		tc->modify_cur = 0;
	}
	return 0;
}

SEC("fexit/_ib_modify_qp")
int fexit_modify_qp(__u64 *ctx)
{
	struct task_calls *tc = task_calls_get(false);
	__u64 ts = tc ? tc->modify_ts : 0;
	__u64 cur = tc ? tc->modify_cur : 0;

	if (!ts)
		ts = bpf_ktime_get_ns(); /* attached mid-call: the return's time */
	on_modify(ts, (struct ib_qp *)ctx[0], (struct ib_qp_attr *)ctx[1], (int)ctx[2], (int)ctx[4], cur, true);
	if (tc) {
		tc->modify_ts = 0;
		tc->modify_cur = 0;
	}
	return 0;
}

/*
 * Providers check a modify with ib_modify_qp_is_ok(cur_state, next_state,
 * type, mask), cur_state being their own idea of the QP's state (rxe,
 * mlx4, mlx5, hns and others): inside a modify, the first call says where
 * the QP was when the modify began, Error when the provider moved it there
 * itself (a completion error, a responder's access error).
 */
SEC("fentry/ib_modify_qp_is_ok")
int fentry_modify_qp_is_ok(__u64 *ctx)
{
	struct task_calls *tc = task_calls_get(false);

	if (tc && tc->modify_ts && !tc->modify_cur)
		tc->modify_cur = (__u32)ctx[0] + 1;
	return 0;
}

SEC("fentry/ib_destroy_qp_user")
int fentry_destroy_qp(__u64 *ctx)
{
	struct task_calls *tc = task_calls_get(true);
	__u64 qp = ctx[0];
	int slot;

	if (!tc)
		return 0;
	/* A free slot or this QP's; else the older one, left by a lost return. */
	if (!tc->destroy_qp[0] || tc->destroy_qp[0] == qp)
		slot = 0;
	else if (!tc->destroy_qp[1] || tc->destroy_qp[1] == qp)
		slot = 1;
	else
		slot = tc->destroy[0].ts_ns < tc->destroy[1].ts_ns ? 0 : 1;
	slot &= 1;
	tc->destroy_qp[slot] = qp;
	clear(&tc->destroy[slot], KIND_QP_DESTROY, PROBE_DESTROY_QP_USER, bpf_ktime_get_ns());
	fill_task(&tc->destroy[slot]);
	fill_qp(&tc->destroy[slot], (struct ib_qp *)qp, true);
	return 0;
}

SEC("fexit/ib_destroy_qp_user")
int fexit_destroy_qp(__u64 *ctx)
{
	struct task_calls *tc = task_calls_get(false);
	__u64 qp = ctx[0];
	int slot;

	if (tc && tc->destroy_qp[0] == qp)
		slot = 0;
	else if (tc && tc->destroy_qp[1] == qp)
		slot = 1;
	else {
		count(COUNTER_UNMATCHED);
		return 0;
	}
	tc->destroy_qp[slot] = 0;
	output(&tc->destroy[slot], (int)ctx[2]);
	return 0;
}

SEC("fentry/ib_uverbs_qp_event_handler")
int fentry_uverbs_qp_event(__u64 *ctx)
{
	on_qp_event(PROBE_UVERBS_QP_EVENT, (struct ib_event *)ctx[0], false);
	return 0;
}

SEC("fentry/__ib_qp_event_handler")
int fentry_qp_event(__u64 *ctx)
{
	on_qp_event(PROBE_QP_EVENT, (struct ib_event *)ctx[0], false);
	return 0;
}

SEC("fentry/__ib_shared_qp_event_handler")
int fentry_shared_qp_event(__u64 *ctx)
{
	on_qp_event(PROBE_SHARED_QP_EVENT, (struct ib_event *)ctx[0], false);
	return 0;
}

SEC("fentry/ib_dispatch_event")
int fentry_dispatch_event(__u64 *ctx)
{
	on_dispatch_event((struct ib_event *)ctx[0], false);
	return 0;
}

SEC("fexit/ib_register_device")
int fexit_register_device(__u64 *ctx)
{
	on_register((struct ib_device *)ctx[0], (int)ctx[3], true);
	return 0;
}

SEC("fentry/__ib_unregister_device")
int fentry_unregister_device(__u64 *ctx)
{
	on_unregister((struct ib_device *)ctx[0], true);
	return 0;
}

SEC("fentry/ib_device_rename")
int fentry_device_rename(__u64 *ctx)
{
	struct task_calls *tc = task_calls_get(true);
	struct qp_event *e;

	if (!tc)
		return 0;
	e = &tc->rename;
	clear(e, KIND_DEVICE_RENAME, PROBE_DEVICE_RENAME, bpf_ktime_get_ns());
	fill_task(e);
	fill_dev(e, (struct ib_device *)ctx[0], true);
	bpf_probe_read_kernel_str(&e->str, sizeof(e->str), (const char *)ctx[1]);
	return 0;
}

SEC("fexit/ib_device_rename")
int fexit_device_rename(__u64 *ctx)
{
	struct task_calls *tc = task_calls_get(false);

	if (!tc || tc->rename.kind != KIND_DEVICE_RENAME) {
		count(COUNTER_UNMATCHED);
		return 0;
	}
	output(&tc->rename, (int)ctx[2]);
	tc->rename.kind = 0;
	return 0;
}

/* The drains: start at entry, end with the time they took at return. */
static __always_inline void drain_entry(__u8 probe, int slot, struct ib_qp *qp)
{
	struct task_calls *tc = task_calls_get(true);
	__u64 now = bpf_ktime_get_ns();

	on_drain(KIND_DRAIN_START, probe, qp, now, 0, true);
	if (tc)
		tc->drain_ts[slot & 1] = now;
}

static __always_inline void drain_exit(__u8 probe, int slot, struct ib_qp *qp)
{
	struct task_calls *tc = task_calls_get(false);
	__u64 now = bpf_ktime_get_ns();
	__u64 start = tc ? tc->drain_ts[slot & 1] : 0;

	if (!start) {
		count(COUNTER_UNMATCHED);
		return;
	}
	on_drain(KIND_DRAIN_END, probe, qp, now, now - start, true);
	tc->drain_ts[slot & 1] = 0;
}

SEC("fentry/ib_drain_qp")
int fentry_drain_qp(__u64 *ctx)
{
	drain_entry(PROBE_DRAIN_QP, 0, (struct ib_qp *)ctx[0]);
	return 0;
}

SEC("fexit/ib_drain_qp")
int fexit_drain_qp(__u64 *ctx)
{
	drain_exit(PROBE_DRAIN_QP, 0, (struct ib_qp *)ctx[0]);
	return 0;
}

SEC("fentry/ib_drain_rq")
int fentry_drain_rq(__u64 *ctx)
{
	drain_entry(PROBE_DRAIN_RQ, 1, (struct ib_qp *)ctx[0]);
	return 0;
}

SEC("fexit/ib_drain_rq")
int fexit_drain_rq(__u64 *ctx)
{
	drain_exit(PROBE_DRAIN_RQ, 1, (struct ib_qp *)ctx[0]);
	return 0;
}

/*
 * The kernel's resource tracking: every QP, CQ, PD, MR, SRQ, context,
 * rdma_cm ID and counter a device lists is added by rdma_restrack_add and
 * leaves the list in rdma_restrack_del or, for PDs, SRQs, QPs and user
 * CQs, in rdma_restrack_begin_del (rdma_restrack_abort_del puts it back
 * when the destroy fails; rdma_restrack_commit_del forgets what is no
 * longer listed). Their returns are counted, no record written: a resource
 * summary read after the count was taken lists every change it counts
 * (Tracer.ResourceChanges).
 */
SEC("fexit/rdma_restrack_add")
int fexit_restrack_add(__u64 *ctx)
{
	count(COUNTER_RESTRACK);
	return 0;
}

SEC("fexit/rdma_restrack_del")
int fexit_restrack_del(__u64 *ctx)
{
	count(COUNTER_RESTRACK);
	return 0;
}

SEC("fexit/rdma_restrack_begin_del")
int fexit_restrack_begin_del(__u64 *ctx)
{
	count(COUNTER_RESTRACK);
	return 0;
}

SEC("fexit/rdma_restrack_abort_del")
int fexit_restrack_abort_del(__u64 *ctx)
{
	count(COUNTER_RESTRACK);
	return 0;
}

/*
 * ---- kprobe / kretprobe fallbacks. ----
 * A kretprobe sees only the return value, so whatever the return needs of
 * the arguments was recorded by the matching kprobe.
 */

/*
 * The creates' entries keep what a failed create is recorded with. Their
 * returns record every create, seen entry or not: a create in progress
 * while the probes were attached has no arguments, which only a failure
 * needs.
 */
SEC("kprobe/ib_create_qp_user")
int kprobe_create_qp_user(struct kprobe_regs *ctx)
{
	enter(PROBE_CREATE_QP_USER, KP_ARG1(ctx), 0, 0);
	return 0;
}

SEC("kprobe/ib_create_qp_kernel")
int kprobe_create_qp_kernel(struct kprobe_regs *ctx)
{
	struct ib_pd *pd = (struct ib_pd *)KP_ARG1(ctx);

	enter(PROBE_CREATE_QP_KERNEL, (__u64)BPF_CORE_READ(pd, device), 0, KP_ARG3(ctx));
	return 0;
}

static __always_inline void kretprobe_create(struct kprobe_regs *ctx, __u8 probe)
{
	struct call_key k = key_of(probe);
	struct call *c = bpf_map_lookup_elem(&calls, &k);
	struct create_args a = {};

	if (c) {
		a.dev = (struct ib_device *)c->arg0;
		a.owner = (const char *)c->arg2;
		bpf_map_delete_elem(&calls, &k);
	}
	on_create(ctx, probe, (struct ib_qp *)KP_RET(ctx), a, false);
}

SEC("kretprobe/ib_create_qp_user")
int kretprobe_create_qp_user(struct kprobe_regs *ctx)
{
	kretprobe_create(ctx, PROBE_CREATE_QP_USER);
	return 0;
}

SEC("kretprobe/ib_create_qp_kernel")
int kretprobe_create_qp_kernel(struct kprobe_regs *ctx)
{
	kretprobe_create(ctx, PROBE_CREATE_QP_KERNEL);
	return 0;
}

/* arg1 packs what the return needs of attr: the mask and the new state. */
SEC("kprobe/_ib_modify_qp")
int kprobe_modify_qp(struct kprobe_regs *ctx)
{
	struct ib_qp_attr *attr = (struct ib_qp_attr *)KP_ARG2(ctx);
	__u32 mask = (__u32)KP_ARG3(ctx);
	__u64 state = 0;

	if (mask & IB_QP_STATE)
		state = BPF_CORE_READ(attr, qp_state);
	enter(PROBE_MODIFY_QP, KP_ARG1(ctx), (state << 32) | mask, 0);
	return 0;
}

SEC("kretprobe/_ib_modify_qp")
int kretprobe_modify_qp(struct kprobe_regs *ctx)
{
	struct call c;
	struct qp_event *e;

	if (!leave(PROBE_MODIFY_QP, &c))
		return 0;
	e = reserve(KIND_QP_MODIFY, PROBE_MODIFY_QP, c.ts_ns);
	if (!e)
		return 0;
	fill_task(e);
	fill_qp(e, (struct ib_qp *)c.arg0, false);
	if (c.arg1 & IB_QP_STATE) {
		e->flags |= FLAG_HAS_STATE;
		e->new_state = c.arg1 >> 32;
	}
	if (c.arg2) {
		e->flags |= FLAG_CUR_STATE;
		e->cur_state = c.arg2 - 1;
	}
	e->result = (__s32)KP_RET(ctx);
	submit(e);
	return 0;
}

/* The kprobe side of fentry_modify_qp_is_ok: arg2 of the modify's call. */
SEC("kprobe/ib_modify_qp_is_ok")
int kprobe_modify_qp_is_ok(struct kprobe_regs *ctx)
{
	struct call_key k = key_of(PROBE_MODIFY_QP);
	struct call *c = bpf_map_lookup_elem(&calls, &k);

	if (c && !c->arg2)
		c->arg2 = (__u32)KP_ARG1(ctx) + 1;
	return 0;
}

SEC("kprobe/ib_destroy_qp_user")
int kprobe_destroy_qp(struct kprobe_regs *ctx)
{
	on_destroy_entry((struct ib_qp *)KP_ARG1(ctx), false);
	return 0;
}

SEC("kretprobe/ib_destroy_qp_user")
int kretprobe_destroy_qp(struct kprobe_regs *ctx)
{
	on_pending_return(PROBE_DESTROY_QP_USER, (int)KP_RET(ctx));
	return 0;
}

SEC("kprobe/ib_uverbs_qp_event_handler")
int kprobe_uverbs_qp_event(struct kprobe_regs *ctx)
{
	on_qp_event(PROBE_UVERBS_QP_EVENT, (struct ib_event *)KP_ARG1(ctx), false);
	return 0;
}

SEC("kprobe/__ib_qp_event_handler")
int kprobe_qp_event(struct kprobe_regs *ctx)
{
	on_qp_event(PROBE_QP_EVENT, (struct ib_event *)KP_ARG1(ctx), false);
	return 0;
}

SEC("kprobe/__ib_shared_qp_event_handler")
int kprobe_shared_qp_event(struct kprobe_regs *ctx)
{
	on_qp_event(PROBE_SHARED_QP_EVENT, (struct ib_event *)KP_ARG1(ctx), false);
	return 0;
}

SEC("kprobe/ib_dispatch_event")
int kprobe_dispatch_event(struct kprobe_regs *ctx)
{
	on_dispatch_event((struct ib_event *)KP_ARG1(ctx), false);
	return 0;
}

SEC("kprobe/ib_register_device")
int kprobe_register_device(struct kprobe_regs *ctx)
{
	enter(PROBE_REGISTER_DEVICE, KP_ARG1(ctx), 0, 0);
	return 0;
}

SEC("kretprobe/ib_register_device")
int kretprobe_register_device(struct kprobe_regs *ctx)
{
	struct call c;

	if (leave(PROBE_REGISTER_DEVICE, &c))
		on_register((struct ib_device *)c.arg0, (int)KP_RET(ctx), false);
	return 0;
}

SEC("kprobe/__ib_unregister_device")
int kprobe_unregister_device(struct kprobe_regs *ctx)
{
	on_unregister((struct ib_device *)KP_ARG1(ctx), false);
	return 0;
}

SEC("kprobe/ib_device_rename")
int kprobe_device_rename(struct kprobe_regs *ctx)
{
	on_rename_entry((struct ib_device *)KP_ARG1(ctx), (const char *)KP_ARG2(ctx), false);
	return 0;
}

SEC("kretprobe/ib_device_rename")
int kretprobe_device_rename(struct kprobe_regs *ctx)
{
	on_pending_return(PROBE_DEVICE_RENAME, (int)KP_RET(ctx));
	return 0;
}

SEC("kprobe/ib_drain_qp")
int kprobe_drain_qp(struct kprobe_regs *ctx)
{
	struct ib_qp *qp = (struct ib_qp *)KP_ARG1(ctx);

	on_drain(KIND_DRAIN_START, PROBE_DRAIN_QP, qp, bpf_ktime_get_ns(), 0, false);
	enter(PROBE_DRAIN_QP, (__u64)qp, 0, 0);
	return 0;
}

SEC("kretprobe/ib_drain_qp")
int kretprobe_drain_qp(struct kprobe_regs *ctx)
{
	struct call c;
	__u64 now = bpf_ktime_get_ns();

	if (leave(PROBE_DRAIN_QP, &c))
		on_drain(KIND_DRAIN_END, PROBE_DRAIN_QP, (struct ib_qp *)c.arg0, now, now - c.ts_ns, false);
	return 0;
}

SEC("kprobe/ib_drain_rq")
int kprobe_drain_rq(struct kprobe_regs *ctx)
{
	struct ib_qp *qp = (struct ib_qp *)KP_ARG1(ctx);

	on_drain(KIND_DRAIN_START, PROBE_DRAIN_RQ, qp, bpf_ktime_get_ns(), 0, false);
	enter(PROBE_DRAIN_RQ, (__u64)qp, 0, 0);
	return 0;
}

SEC("kretprobe/ib_drain_rq")
int kretprobe_drain_rq(struct kprobe_regs *ctx)
{
	struct call c;
	__u64 now = bpf_ktime_get_ns();

	if (leave(PROBE_DRAIN_RQ, &c))
		on_drain(KIND_DRAIN_END, PROBE_DRAIN_RQ, (struct ib_qp *)c.arg0, now, now - c.ts_ns, false);
	return 0;
}

SEC("kretprobe/rdma_restrack_add")
int kretprobe_restrack_add(struct kprobe_regs *ctx)
{
	count(COUNTER_RESTRACK);
	return 0;
}

SEC("kretprobe/rdma_restrack_del")
int kretprobe_restrack_del(struct kprobe_regs *ctx)
{
	count(COUNTER_RESTRACK);
	return 0;
}

SEC("kretprobe/rdma_restrack_begin_del")
int kretprobe_restrack_begin_del(struct kprobe_regs *ctx)
{
	count(COUNTER_RESTRACK);
	return 0;
}

SEC("kretprobe/rdma_restrack_abort_del")
int kretprobe_restrack_abort_del(struct kprobe_regs *ctx)
{
	count(COUNTER_RESTRACK);
	return 0;
}

/*
 * ---- uprobes on the verbs libraries (sites.go attaches them). ----
 * The entry of a QP-creating library function: a thread's outermost call
 * records where it returns to and which function it is (the cookie); a
 * call made inside it (rdma_create_qp calls ibv_create_qp) only counts, so
 * the site stays the application's call of librdmacm.
 */
static __always_inline __u64 entry_return_address(struct kprobe_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	__u64 ret = 0;

	bpf_probe_read_user(&ret, sizeof(ret), (const void *)KP_SP(ctx));
	return ret;
#else
	return KP_LR(ctx);
#endif
}

/* bpf_find_vma's callback: the file mapping that holds the address. */
static long note_vma(struct task_struct *task, struct vm_area_struct *vma, struct user_call *c)
{
	struct inode *inode = BPF_CORE_READ(vma, vm_file, f_inode);

	if (!inode)
		return 0;
	c->vma.start = BPF_CORE_READ(vma, vm_start);
	c->vma.pgoff = BPF_CORE_READ(vma, vm_pgoff);
	c->vma.ino = BPF_CORE_READ(inode, i_ino);
	c->vma.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	c->has_vma = 1;
	return 0;
}

SEC("uprobe")
int uprobe_lib_entry(struct kprobe_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 sp = KP_SP(ctx);
	__u64 ret = entry_return_address(ctx);
	struct user_call *c = bpf_map_lookup_elem(&user_calls, &id);
	struct user_call n = {.ret = ret, .sp = sp, .depth = 1, .ustack = -1};

	/*
	 * A call inside the outermost one runs on a deeper stack (a lower sp).
	 * At the same sp, the same return address is the same call seen by a
	 * second uprobe (one library inode reached through two paths), or a
	 * tail call; another one is a new call after a return that was missed,
	 * as is a higher sp.
	 */
	if (c && c->depth > 0 && (sp < c->sp || (sp == c->sp && ret == c->ret))) {
		c->depth++;
		return 0;
	}
	n.fn = (__u32)bpf_get_attach_cookie(ctx);
	/*
	 * The mapping of the return address, so that the reader need not
	 * look it up in /proc for each create (it fails, and the reader
	 * looks, when another thread holds the process's mmap lock).
	 */
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_find_vma))
		bpf_find_vma(bpf_get_current_task_btf(), ret, note_vma, &n, 0);
	if (kernel_stacks) {
		long sid = store_stack(ctx, BPF_F_USER_STACK, &n.ustack_flips);

		if (sid >= 0)
			n.ustack = sid;
	}
	bpf_map_update_elem(&user_calls, &id, &n, BPF_ANY);
	return 0;
}

/* The return of a library function: the outermost one's ends the call. */
SEC("uretprobe")
int uretprobe_lib_return(struct kprobe_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct user_call *c = bpf_map_lookup_elem(&user_calls, &id);

	if (!c)
		return 0;
	if (c->depth > 1)
		c->depth--;
	else
		bpf_map_delete_elem(&user_calls, &id);
	return 0;
}
