// SPDX-License-Identifier: Apache-2.0
/*
 * qpwork - RDMA queue pair workload for the rdmatool VM lab.
 *
 * Purpose
 *   rdmatool looks for leaked RDMA queue pairs. This program creates QPs on
 *   one verbs device (soft-RoCE rxe0 or soft-iWARP siw0 in the lab), moves
 *   them to a chosen state, optionally connects them to each other in
 *   loopback (raw verbs or librdmacm), holds them while reporting every
 *   asynchronous event, and finally tears them down in one of several ways:
 *   the IB spec 10.3.1 sequence, an ERR + marker drain, trusting
 *   IBV_EVENT_QP_LAST_WQE_REACHED, destroying directly, or not at all.
 *   It can also orphan its QPs (parent exits, a forked child keeps the
 *   verbs file descriptors) or churn create/destroy cycles, or register
 *   and hold many small memory regions and no QP (--reg-mrs).
 *
 * Output
 *   One JSON object per line on stdout, flushed after each line; Go tests
 *   parse it. Errors are also reported on stderr. See README.md in this
 *   directory for the full option list and line formats.
 *
 * Usage (examples)
 *   qpwork --dev rxe0 --qps 4                         # 4 RC QPs in INIT
 *   qpwork --dev rxe0 --pairs --qps 2 --srq --teardown spec --hold 1
 *   qpwork --dev siw0 --pairs --connect cm --addr 192.0.2.2 --hold stdin
 *   qpwork --dev rxe0 --churn-seconds 2
 *   qpwork --dev rxe0 --reg-mrs 100000 --hold stdin  # 100000 MRs of a page
 *
 * Exit status: 0 success, 1 runtime error (an "error" line was printed),
 * 2 bad usage, 128+N when signal N interrupted a "--teardown wait".
 *
 * Design notes
 *   - Single threaded. Every wait is a ppoll() on the non-blocking async
 *     event fd (plus the CM channel fd or stdin where relevant). SIGINT and
 *     SIGTERM are blocked except inside ppoll(), so a signal can never be
 *     lost between checking the flag and going to sleep.
 *   - Every async event is read, printed and acknowledged before any QP is
 *     destroyed, so ibv_destroy_qp() can never wait for an unacked event.
 *   - The only global mutable state is the signal flag.
 *   - QPs are created in functions of their own, which the compiler may
 *     neither inline nor clone (SITE_FN): create_qps_verbs, create_qp_rdmacm,
 *     create_qp_churn and create_qp_oversized. rdmatool's creation sites
 *     name them, and the lab tests check that they do.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define PROG "qpwork"

/* Fixed protocol constants. */
#define QPW_PSN           0x001234u          /* sq_psn == rq_psn for every QP */
#define QPW_QKEY          0x11111111u        /* UD qkey */
#define QPW_MARKER_WRID   0x4d41524b00000000ull  /* "MARK" | qpn */
#define QPW_RECV_WRID     0x52435600000000ull    /* "RCV" | index */
#define QPW_BUF_SIZE      4096
#define QPW_MARKER_LEN    8
#define QPW_RECV_LEN      64
#define QPW_SRQ_WR        256
#define QPW_SRQ_PREPOST   16
#define QPW_QP_WR         16
#define QPW_PATH_MTU      IBV_MTU_1024
#define QPW_DRAIN_SLEEP_US 50

/*
 * A function that creates QPs keeps its name and its own call of the verbs
 * library: never inlined, cloned (.isra, .constprop) or split (.part).
 * clang has no noipa; noinline is enough there.
 */
#if defined(__clang__)
#define SITE_FN __attribute__((noinline))
#else
#define SITE_FN __attribute__((noipa))
#endif

/* Sentinel for "no QP number" in error reports. */
#define NO_QPN (-1L)

static volatile sig_atomic_t g_signal;

enum teardown_mode { TD_DIRECT, TD_SPEC, TD_MARKER, TD_WAIT, TD_NONE };
enum connect_mode { CONN_VERBS, CONN_CM };
enum churn_states { CHURN_AUTO, CHURN_RTS, CHURN_INIT_ERR };

struct opts {
	const char *dev;
	int port;
	int gid_index;			/* -1: automatic */
	long qps;			/* QPs, or pairs with --pairs */
	bool pairs;
	enum ibv_qp_type type;
	bool srq;
	long srq_every;			/* attach QP i to the SRQ when i % srq_every == 0 */
	enum ibv_qp_state to;
	enum connect_mode conn;
	struct in_addr addr;
	int cm_port;			/* 0: kernel-chosen */
	int timeout_ms;
	enum teardown_mode teardown;
	int last_wqe_timeout_ms;
	int drain_timeout_ms;
	int grace_ms;
	double hold;			/* seconds */
	bool hold_stdin;		/* --hold -1 / stdin */
	bool orphan;
	long churn;			/* cycles, 0: not set */
	double churn_seconds;		/* 0: not set */
	double churn_rate;		/* cycles per second, 0: as fast as it goes */
	enum churn_states churn_states;
	bool batch;
	bool quiet;
	long oversized;			/* creates over max_qp_wr, 0: not set */
	long reconnect;			/* reconnect cycles, 0: not set */
	bool rkey_refresh;		/* --rkey refresh (else keep) */
	bool mrs_dereg;			/* --mrs dereg (else keep) */
	int cycle_pause_ms;		/* pause between reconnect cycles */
	int connected_ms;		/* hold of a new connection before its write */
	long reg_mrs;			/* MRs of a page each, 0: not set */
};

struct qpent {
	long idx;
	bool on_srq;			/* attached to the SRQ */
	struct ibv_qp *qp;
	struct rdma_cm_id *id;		/* --connect cm only */
	uint32_t qpn;
	long peer;			/* index of the peer QP, -1: none */
	bool connected;			/* dest QPN programmed / CM established */
	enum ibv_qp_state state;	/* last state we moved it to */
	bool err_by_us;
	int64_t t_err_us;		/* CLOCK_MONOTONIC when we requested ERR */
	unsigned lastwqe_after_err;	/* LAST_WQE events since our ERR */
	int64_t lastwqe_first_us;	/* us_after_err of the first of them */
};

struct app {
	struct opts o;
	struct ibv_context *ctx;
	struct ibv_context **cm_devs;	/* rdma_get_devices() list (cm) */
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;

	bool have_gid;
	int gid_index;
	union ibv_gid gid;

	struct ibv_pd *pd;
	struct ibv_mr *mr;
	void *buf;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	uint32_t srqn;
	bool srqn_known;
	struct ibv_ah *ah;		/* lazily, for UD marker sends */

	struct qpent *q;
	long nq;
	long created;

	struct rdma_event_channel *ech;
	struct rdma_cm_id *listen;
	uint16_t cm_port;

	sigset_t waitmask;		/* mask used inside ppoll() */
	bool count_only;		/* churn: count async events, do not print */
	uint64_t async_count;
	uint64_t stray_wc;
};

/* ------------------------------------------------------------------ */
/* Time                                                                */

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static struct timespec us_to_ts(int64_t us)
{
	struct timespec ts;

	if (us < 0)
		us = 0;
	ts.tv_sec = us / 1000000;
	ts.tv_nsec = (long)(us % 1000000) * 1000;
	return ts;
}

/* ------------------------------------------------------------------ */
/* JSON line output                                                    */

struct line {
	char buf[2048];
	size_t len;
};

static void l_raw(struct line *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void l_raw(struct line *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (l->len >= sizeof(l->buf) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	l->len += (size_t)n;
	if (l->len > sizeof(l->buf) - 1)
		l->len = sizeof(l->buf) - 1;
}

static void l_quoted(struct line *l, const char *s)
{
	const unsigned char *p;

	l_raw(l, "\"");
	for (p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			l_raw(l, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			l_raw(l, "\\u%04x", *p);
		else
			l_raw(l, "%c", *p);
	}
	l_raw(l, "\"");
}

static void l_begin(struct line *l, const char *event)
{
	l->len = 0;
	l_raw(l, "{\"event\":");
	l_quoted(l, event);
}

static void l_str(struct line *l, const char *key, const char *val)
{
	l_raw(l, ",\"%s\":", key);
	l_quoted(l, val);
}

static void l_int(struct line *l, const char *key, long long val)
{
	l_raw(l, ",\"%s\":%lld", key, val);
}

static void l_bool(struct line *l, const char *key, bool val)
{
	l_raw(l, ",\"%s\":%s", key, val ? "true" : "false");
}

static void l_num(struct line *l, const char *key, double val, int prec)
{
	if (!isfinite(val))
		val = 0;
	l_raw(l, ",\"%s\":%.*f", key, prec, val);
}

static void l_emit(struct line *l)
{
	l_raw(l, "}");
	fwrite(l->buf, 1, l->len, stdout);
	fputc('\n', stdout);
	fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* Names                                                               */

static const char *qp_state_name(enum ibv_qp_state s)
{
	switch (s) {
	case IBV_QPS_RESET: return "RESET";
	case IBV_QPS_INIT:  return "INIT";
	case IBV_QPS_RTR:   return "RTR";
	case IBV_QPS_RTS:   return "RTS";
	case IBV_QPS_SQD:   return "SQD";
	case IBV_QPS_SQE:   return "SQE";
	case IBV_QPS_ERR:   return "ERR";
	default:            return "UNKNOWN";
	}
}

static const char *qp_type_name(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC: return "RC";
	case IBV_QPT_UC: return "UC";
	case IBV_QPT_UD: return "UD";
	default:         return "OTHER";
	}
}

static const char *event_name(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_CQ_ERR:              return "CQ_ERR";
	case IBV_EVENT_QP_FATAL:            return "QP_FATAL";
	case IBV_EVENT_QP_REQ_ERR:          return "QP_REQ_ERR";
	case IBV_EVENT_QP_ACCESS_ERR:       return "QP_ACCESS_ERR";
	case IBV_EVENT_COMM_EST:            return "COMM_EST";
	case IBV_EVENT_SQ_DRAINED:          return "SQ_DRAINED";
	case IBV_EVENT_PATH_MIG:            return "PATH_MIG";
	case IBV_EVENT_PATH_MIG_ERR:        return "PATH_MIG_ERR";
	case IBV_EVENT_DEVICE_FATAL:        return "DEVICE_FATAL";
	case IBV_EVENT_PORT_ACTIVE:         return "PORT_ACTIVE";
	case IBV_EVENT_PORT_ERR:            return "PORT_ERR";
	case IBV_EVENT_LID_CHANGE:          return "LID_CHANGE";
	case IBV_EVENT_PKEY_CHANGE:         return "PKEY_CHANGE";
	case IBV_EVENT_SM_CHANGE:           return "SM_CHANGE";
	case IBV_EVENT_SRQ_ERR:             return "SRQ_ERR";
	case IBV_EVENT_SRQ_LIMIT_REACHED:   return "SRQ_LIMIT_REACHED";
	case IBV_EVENT_QP_LAST_WQE_REACHED: return "LAST_WQE_REACHED";
	case IBV_EVENT_CLIENT_REREGISTER:   return "CLIENT_REREGISTER";
	case IBV_EVENT_GID_CHANGE:          return "GID_CHANGE";
	case IBV_EVENT_WQ_FATAL:            return "WQ_FATAL";
	default:                            return "UNKNOWN";
	}
}

static const char *wc_status_name(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:            return "SUCCESS";
	case IBV_WC_LOC_LEN_ERR:        return "LOC_LEN_ERR";
	case IBV_WC_LOC_QP_OP_ERR:      return "LOC_QP_OP_ERR";
	case IBV_WC_LOC_EEC_OP_ERR:     return "LOC_EEC_OP_ERR";
	case IBV_WC_LOC_PROT_ERR:       return "LOC_PROT_ERR";
	case IBV_WC_WR_FLUSH_ERR:       return "WR_FLUSH_ERR";
	case IBV_WC_MW_BIND_ERR:        return "MW_BIND_ERR";
	case IBV_WC_BAD_RESP_ERR:       return "BAD_RESP_ERR";
	case IBV_WC_LOC_ACCESS_ERR:     return "LOC_ACCESS_ERR";
	case IBV_WC_REM_INV_REQ_ERR:    return "REM_INV_REQ_ERR";
	case IBV_WC_REM_ACCESS_ERR:     return "REM_ACCESS_ERR";
	case IBV_WC_REM_OP_ERR:         return "REM_OP_ERR";
	case IBV_WC_RETRY_EXC_ERR:      return "RETRY_EXC_ERR";
	case IBV_WC_RNR_RETRY_EXC_ERR:  return "RNR_RETRY_EXC_ERR";
	case IBV_WC_LOC_RDD_VIOL_ERR:   return "LOC_RDD_VIOL_ERR";
	case IBV_WC_REM_INV_RD_REQ_ERR: return "REM_INV_RD_REQ_ERR";
	case IBV_WC_REM_ABORT_ERR:      return "REM_ABORT_ERR";
	case IBV_WC_INV_EECN_ERR:       return "INV_EECN_ERR";
	case IBV_WC_INV_EEC_STATE_ERR:  return "INV_EEC_STATE_ERR";
	case IBV_WC_FATAL_ERR:          return "FATAL_ERR";
	case IBV_WC_RESP_TIMEOUT_ERR:   return "RESP_TIMEOUT_ERR";
	case IBV_WC_GENERAL_ERR:        return "GENERAL_ERR";
	case IBV_WC_TM_ERR:             return "TM_ERR";
	case IBV_WC_TM_RNDV_INCOMPLETE: return "TM_RNDV_INCOMPLETE";
	default:                        return "UNKNOWN";
	}
}

static const char *teardown_name(enum teardown_mode m)
{
	switch (m) {
	case TD_SPEC:   return "spec";
	case TD_MARKER: return "marker";
	case TD_WAIT:   return "wait";
	case TD_NONE:   return "none";
	case TD_DIRECT: return "direct";
	}
	return "unknown";
}

static const char *gid_type_name(uint32_t t)
{
	switch (t) {
	case IBV_GID_TYPE_IB:      return "IB";
	case IBV_GID_TYPE_ROCE_V1: return "RoCEv1";
	case IBV_GID_TYPE_ROCE_V2: return "RoCEv2";
	default:                   return "unknown";
	}
}

static const char *transport_name(enum ibv_transport_type t)
{
	switch (t) {
	case IBV_TRANSPORT_IB:    return "IB";
	case IBV_TRANSPORT_IWARP: return "iWARP";
	default:                  return "other";
	}
}

static const char *link_layer_name(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET:   return "Ethernet";
	default:                        return "unspecified";
	}
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */

/* Normalise the two verbs error conventions: errno value or -1/errno. */
static int err_of(int ret)
{
	if (ret > 0)
		return ret;
	return errno ? errno : EIO;
}

static void fail(struct app *a, const char *op, long qpn, int err,
		 const char *detail) __attribute__((noreturn));

static void fail(struct app *a, const char *op, long qpn, int err,
		 const char *detail)
{
	struct line l;
	const char *msg = strerror(err);

	l_begin(&l, "error");
	l_str(&l, "op", op);
	if (qpn >= 0)
		l_int(&l, "qpn", qpn);
	l_int(&l, "errno", err);
	l_str(&l, "msg", msg);
	if (detail)
		l_str(&l, "detail", detail);
	if (a && a->q)
		l_int(&l, "created", a->created);
	l_emit(&l);

	if (qpn >= 0)
		fprintf(stderr, PROG ": %s (qpn %ld): %s%s%s\n", op, qpn, msg,
			detail ? ": " : "", detail ? detail : "");
	else
		fprintf(stderr, PROG ": %s: %s%s%s\n", op, msg,
			detail ? ": " : "", detail ? detail : "");
	fflush(stderr);
	exit(1);
}

static void warn_line(const char *msg)
{
	struct line l;

	l_begin(&l, "warning");
	l_str(&l, "msg", msg);
	l_emit(&l);
	fprintf(stderr, PROG ": warning: %s\n", msg);
}

/* ------------------------------------------------------------------ */
/* Usage and option parsing                                            */

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " --dev NAME [options]\n"
"  --dev NAME               ibv device (rxe0, siw0)              [required]\n"
"  --port N                 port number                          [1]\n"
"  --gid-index N            GID index                            [auto]\n"
"  --qps N                  QPs (pairs with --pairs)             [1]\n"
"  --pairs                  create N loopback-connected pairs\n"
"  --type rc|uc|ud          QP type                              [rc]\n"
"  --srq                    attach every QP to one SRQ\n"
"  --srq-every N            attach only QPs 0, N, 2N, ... to the SRQ (SRQ QP ranges with gaps)\n"
"  --to STATE               RESET|INIT|RTR|RTS|ERR     [INIT, RTS with --pairs]\n"
"  --connect verbs|cm       how pairs are connected              [verbs]\n"
"  --addr A.B.C.D           local IPv4 address (--connect cm)\n"
"  --cm-port N              rdma_cm listen port                  [0 = any]\n"
"  --timeout-ms N           rdma_cm timeout per pair             [10000]\n"
"  --teardown MODE          spec|marker|wait|direct|none         [direct]\n"
"  --last-wqe-timeout-ms N  spec: wait for LAST_WQE_REACHED      [2000]\n"
"  --drain-timeout-ms N     spec/marker: wait for the marker     [2000]\n"
"  --event-grace-ms N       spec/marker: collect events before destroy [10]\n"
"  --hold SECONDS|-1|stdin  hold time after the ready line       [0]\n"
"  --orphan                 fork after ready; the parent exits\n"
"  --churn N                N create/destroy cycles\n"
"  --churn-seconds S        churn for S seconds\n"
"  --churn-rate R           at most R cycles per second\n"
"  --churn-states auto|rts|init-err   churn state path          [auto]\n"
"  --batch                  scale mode: create fast, print a summary\n"
"  --oversized N            N creates asking for max_qp_wr+1 WRs, each refused\n"
"  --reconnect N            N RDMA WRITEs of one rdma_cm pair that reconnects\n"
"                           after a failed write; the first R_Key is stale\n"
"  --rkey keep|refresh      --reconnect: the stale R_Key, or     [keep]\n"
"                           the new connection's after a failure\n"
"  --mrs keep|dereg         --reconnect: ended connections' MRs  [keep]\n"
"  --cycle-pause-ms N       --reconnect: pause between writes    [0]\n"
"  --connected-ms N         --reconnect: hold a new connection N ms\n"
"                           before its first write               [0]\n"
"  --reg-mrs N              register N MRs of a page each on one PD and\n"
"                           hold them (no QP)\n"
"  --quiet                  no per-QP qp/err/destroyed lines\n"
"  --help                   this text\n");
}

static void bad_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void bad_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	usage(stderr);
	exit(2);
}

static long parse_long(const char *opt, const char *s, long min, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end != '\0' || v < min || v > max)
		bad_usage("%s: expected an integer in [%ld, %ld], got '%s'",
			  opt, min, max, s);
	return v;
}

static double parse_double(const char *opt, const char *s, double min,
			   double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end != '\0' || !isfinite(v) || v < min ||
	    v > max)
		bad_usage("%s: expected a number in [%g, %g], got '%s'",
			  opt, min, max, s);
	return v;
}

/* "keep" (false) or other (true), the two values of an option. */
static bool parse_keep_or(const char *opt, const char *s, const char *other)
{
	if (strcmp(s, "keep") && strcmp(s, other))
		bad_usage("%s: expected keep|%s, got '%s'", opt, other, s);
	return strcmp(s, other) == 0;
}

static enum ibv_qp_state parse_state(const char *s)
{
	if (!strcasecmp(s, "RESET"))
		return IBV_QPS_RESET;
	if (!strcasecmp(s, "INIT"))
		return IBV_QPS_INIT;
	if (!strcasecmp(s, "RTR"))
		return IBV_QPS_RTR;
	if (!strcasecmp(s, "RTS"))
		return IBV_QPS_RTS;
	if (!strcasecmp(s, "ERR"))
		return IBV_QPS_ERR;
	bad_usage("--to: expected RESET|INIT|RTR|RTS|ERR, got '%s'", s);
}

static const char *opt_name(const struct option *opts, int val)
{
	for (; opts->name; opts++)
		if (opts->val == val)
			return opts->name;
	return "?";
}

enum {
	OPT_DEV = 256, OPT_PORT, OPT_GID, OPT_QPS, OPT_PAIRS, OPT_TYPE, OPT_SRQ, OPT_SRQ_EVERY,
	OPT_TO, OPT_CONNECT, OPT_ADDR, OPT_CMPORT, OPT_TIMEOUT, OPT_TEARDOWN,
	OPT_LASTWQE, OPT_DRAIN, OPT_GRACE, OPT_HOLD, OPT_ORPHAN, OPT_CHURN,
	OPT_CHURN_SECS, OPT_CHURN_RATE, OPT_CHURN_STATES, OPT_BATCH, OPT_QUIET, OPT_OVERSIZED, OPT_RECONNECT, OPT_RKEY, OPT_MRS,
	OPT_CYCLE_PAUSE, OPT_CONNECTED, OPT_REG_MRS, OPT_HELP,
	OPT_LAST
};

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "dev",                 required_argument, NULL, OPT_DEV },
		{ "port",                required_argument, NULL, OPT_PORT },
		{ "gid-index",           required_argument, NULL, OPT_GID },
		{ "qps",                 required_argument, NULL, OPT_QPS },
		{ "pairs",               no_argument,       NULL, OPT_PAIRS },
		{ "type",                required_argument, NULL, OPT_TYPE },
		{ "srq",                 no_argument,       NULL, OPT_SRQ },
		{ "srq-every",           required_argument, NULL, OPT_SRQ_EVERY },
		{ "to",                  required_argument, NULL, OPT_TO },
		{ "connect",             required_argument, NULL, OPT_CONNECT },
		{ "addr",                required_argument, NULL, OPT_ADDR },
		{ "cm-port",             required_argument, NULL, OPT_CMPORT },
		{ "timeout-ms",          required_argument, NULL, OPT_TIMEOUT },
		{ "teardown",            required_argument, NULL, OPT_TEARDOWN },
		{ "last-wqe-timeout-ms", required_argument, NULL, OPT_LASTWQE },
		{ "drain-timeout-ms",    required_argument, NULL, OPT_DRAIN },
		{ "event-grace-ms",      required_argument, NULL, OPT_GRACE },
		{ "hold",                required_argument, NULL, OPT_HOLD },
		{ "orphan",              no_argument,       NULL, OPT_ORPHAN },
		{ "churn",               required_argument, NULL, OPT_CHURN },
		{ "churn-seconds",       required_argument, NULL, OPT_CHURN_SECS },
		{ "churn-rate",          required_argument, NULL, OPT_CHURN_RATE },
		{ "churn-states",        required_argument, NULL, OPT_CHURN_STATES },
		{ "batch",               no_argument,       NULL, OPT_BATCH },
		{ "quiet",               no_argument,       NULL, OPT_QUIET },
		{ "oversized",           required_argument, NULL, OPT_OVERSIZED },
		{ "reconnect",           required_argument, NULL, OPT_RECONNECT },
		{ "rkey",                required_argument, NULL, OPT_RKEY },
		{ "mrs",                 required_argument, NULL, OPT_MRS },
		{ "cycle-pause-ms",      required_argument, NULL, OPT_CYCLE_PAUSE },
		{ "connected-ms",        required_argument, NULL, OPT_CONNECTED },
		{ "reg-mrs",             required_argument, NULL, OPT_REG_MRS },
		{ "help",                no_argument,       NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 }
	};
	bool given[OPT_LAST - OPT_DEV] = { false };
	bool churn_mode;
	int c;

#define GIVEN(opt) given[(opt) - OPT_DEV]

	memset(o, 0, sizeof(*o));
	o->port = 1;
	o->gid_index = -1;
	o->qps = 1;
	o->type = IBV_QPT_RC;
	o->conn = CONN_VERBS;
	o->cm_port = 0;
	o->timeout_ms = 10000;
	o->teardown = TD_DIRECT;
	o->last_wqe_timeout_ms = 2000;
	o->drain_timeout_ms = 2000;
	o->grace_ms = 10;
	o->churn_states = CHURN_AUTO;

	opterr = 0;
	/* Leading ':' makes a missing argument return ':' instead of '?'. */
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		if (c >= OPT_DEV && c < OPT_LAST) {
			if (GIVEN(c))
				bad_usage("option given twice: --%s", opt_name(longopts, c));
			GIVEN(c) = true;
		}
		switch (c) {
		case OPT_DEV:
			if (!*optarg || strlen(optarg) >= IBV_SYSFS_NAME_MAX)
				bad_usage("--dev: bad device name");
			o->dev = optarg;
			break;
		case OPT_PORT:
			o->port = (int)parse_long("--port", optarg, 1, 255);
			break;
		case OPT_GID:
			o->gid_index = (int)parse_long("--gid-index", optarg, 0, 65535);
			break;
		case OPT_QPS:
			o->qps = parse_long("--qps", optarg, 1, 4000000);
			break;
		case OPT_PAIRS:
			o->pairs = true;
			break;
		case OPT_TYPE:
			if (!strcasecmp(optarg, "rc"))
				o->type = IBV_QPT_RC;
			else if (!strcasecmp(optarg, "uc"))
				o->type = IBV_QPT_UC;
			else if (!strcasecmp(optarg, "ud"))
				o->type = IBV_QPT_UD;
			else
				bad_usage("--type: expected rc|uc|ud, got '%s'", optarg);
			break;
		case OPT_SRQ_EVERY:
			o->srq = true;
			o->srq_every = parse_long("--srq-every", optarg, 1, 1000000);
			break;
		case OPT_SRQ:
			o->srq = true;
			break;
		case OPT_TO:
			o->to = parse_state(optarg);
			break;
		case OPT_CONNECT:
			if (!strcmp(optarg, "verbs"))
				o->conn = CONN_VERBS;
			else if (!strcmp(optarg, "cm"))
				o->conn = CONN_CM;
			else
				bad_usage("--connect: expected verbs|cm, got '%s'", optarg);
			break;
		case OPT_ADDR:
			if (inet_pton(AF_INET, optarg, &o->addr) != 1)
				bad_usage("--addr: expected an IPv4 address, got '%s'", optarg);
			break;
		case OPT_CMPORT:
			o->cm_port = (int)parse_long("--cm-port", optarg, 0, 65535);
			break;
		case OPT_TIMEOUT:
			o->timeout_ms = (int)parse_long("--timeout-ms", optarg, 1, 3600000);
			break;
		case OPT_TEARDOWN:
			if (!strcmp(optarg, "spec"))
				o->teardown = TD_SPEC;
			else if (!strcmp(optarg, "marker"))
				o->teardown = TD_MARKER;
			else if (!strcmp(optarg, "wait"))
				o->teardown = TD_WAIT;
			else if (!strcmp(optarg, "direct"))
				o->teardown = TD_DIRECT;
			else if (!strcmp(optarg, "none"))
				o->teardown = TD_NONE;
			else
				bad_usage("--teardown: expected spec|marker|wait|direct|none, got '%s'",
					  optarg);
			break;
		case OPT_LASTWQE:
			o->last_wqe_timeout_ms = (int)parse_long("--last-wqe-timeout-ms",
								 optarg, 0, 3600000);
			break;
		case OPT_DRAIN:
			o->drain_timeout_ms = (int)parse_long("--drain-timeout-ms",
							      optarg, 0, 3600000);
			break;
		case OPT_GRACE:
			o->grace_ms = (int)parse_long("--event-grace-ms", optarg, 0, 60000);
			break;
		case OPT_HOLD:
			if (!strcmp(optarg, "stdin") || !strcmp(optarg, "-1")) {
				o->hold_stdin = true;
			} else {
				o->hold = parse_double("--hold", optarg, 0, 1e7);
			}
			break;
		case OPT_ORPHAN:
			o->orphan = true;
			break;
		case OPT_CHURN:
			o->churn = parse_long("--churn", optarg, 1, 1000000000L);
			break;
		case OPT_CHURN_SECS:
			o->churn_seconds = parse_double("--churn-seconds", optarg, 0.001, 1e6);
			break;
		case OPT_CHURN_RATE:
			o->churn_rate = parse_double("--churn-rate", optarg, 0.001, 1e6);
			break;
		case OPT_CHURN_STATES:
			if (!strcmp(optarg, "auto"))
				o->churn_states = CHURN_AUTO;
			else if (!strcmp(optarg, "rts"))
				o->churn_states = CHURN_RTS;
			else if (!strcmp(optarg, "init-err"))
				o->churn_states = CHURN_INIT_ERR;
			else
				bad_usage("--churn-states: expected auto|rts|init-err, got '%s'",
					  optarg);
			break;
		case OPT_BATCH:
			o->batch = true;
			break;
		case OPT_QUIET:
			o->quiet = true;
			break;
		case OPT_OVERSIZED:
			o->oversized = parse_long("--oversized", optarg, 1, 1000000L);
			break;
		case OPT_RECONNECT:
			o->reconnect = parse_long("--reconnect", optarg, 1, 1000000L);
			break;
		case OPT_RKEY:
			o->rkey_refresh = parse_keep_or("--rkey", optarg, "refresh");
			break;
		case OPT_MRS:
			o->mrs_dereg = parse_keep_or("--mrs", optarg, "dereg");
			break;
		case OPT_CYCLE_PAUSE:
			o->cycle_pause_ms = (int)parse_long("--cycle-pause-ms", optarg, 0, 3600000L);
			break;
		case OPT_CONNECTED:
			o->connected_ms = (int)parse_long("--connected-ms", optarg, 0, 3600000L);
			break;
		case OPT_REG_MRS:
			o->reg_mrs = parse_long("--reg-mrs", optarg, 1, 4000000L);
			break;
		case OPT_HELP:
			usage(stdout);
			exit(0);
		case ':':
			bad_usage("option --%s needs an argument",
				  opt_name(longopts, optopt));
		case '?':
		default:
			if (optopt >= OPT_DEV && optopt < OPT_LAST)
				bad_usage("option --%s takes no argument",
					  opt_name(longopts, optopt));
			bad_usage("unknown option: %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		bad_usage("unexpected argument: %s", argv[optind]);

	if (!o->dev)
		bad_usage("--dev is required");

	churn_mode = GIVEN(OPT_CHURN) || GIVEN(OPT_CHURN_SECS);
	if (!GIVEN(OPT_RECONNECT) && (GIVEN(OPT_RKEY) || GIVEN(OPT_MRS) || GIVEN(OPT_CYCLE_PAUSE) || GIVEN(OPT_CONNECTED)))
		bad_usage("--rkey, --mrs, --cycle-pause-ms and --connected-ms need --reconnect");
	if (GIVEN(OPT_RECONNECT)) {
		static const int ok[] = { OPT_RECONNECT, OPT_RKEY, OPT_MRS, OPT_CYCLE_PAUSE, OPT_CONNECTED, OPT_CONNECT,
					  OPT_ADDR, OPT_CMPORT, OPT_TIMEOUT, OPT_PORT, OPT_HOLD, OPT_QUIET };
		int opt;
		size_t i;

		for (opt = OPT_DEV + 1; opt < OPT_LAST; opt++) {
			bool allowed = false;

			for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
				allowed = allowed || ok[i] == opt;
			if (GIVEN(opt) && !allowed)
				bad_usage("--reconnect takes only --connect cm, --addr, --cm-port, --timeout-ms, "
					  "--port, --rkey, --mrs, --cycle-pause-ms, --connected-ms, --hold and --quiet");
		}
		if (o->conn != CONN_CM || !GIVEN(OPT_ADDR))
			bad_usage("--reconnect needs --connect cm and --addr");
		return;
	}
	if (GIVEN(OPT_OVERSIZED)) {
		int opt;

		/* Only where the device is: the creates are all it does. */
		for (opt = OPT_DEV + 1; opt < OPT_LAST; opt++)
			if (opt != OPT_OVERSIZED && opt != OPT_PORT && opt != OPT_QUIET && opt != OPT_HOLD && GIVEN(opt))
				bad_usage("--oversized takes only --dev, --port, --hold and --quiet");
		return;
	}
	if (GIVEN(OPT_REG_MRS)) {
		int opt;

		/* The MRs and their PD are all it makes. */
		for (opt = OPT_DEV + 1; opt < OPT_LAST; opt++)
			if (opt != OPT_REG_MRS && opt != OPT_PORT && opt != OPT_HOLD && GIVEN(opt))
				bad_usage("--reg-mrs takes only --dev, --port and --hold");
		return;
	}
	if (churn_mode) {
		static const struct { int opt; const char *name; } excl[] = {
			{ OPT_QPS, "--qps" }, { OPT_PAIRS, "--pairs" },
			{ OPT_TO, "--to" }, { OPT_CONNECT, "--connect" },
			{ OPT_ADDR, "--addr" }, { OPT_CMPORT, "--cm-port" },
			{ OPT_TEARDOWN, "--teardown" }, { OPT_HOLD, "--hold" },
			{ OPT_ORPHAN, "--orphan" }, { OPT_BATCH, "--batch" },
		};
		size_t i;

		if (GIVEN(OPT_CHURN) && GIVEN(OPT_CHURN_SECS))
			bad_usage("--churn and --churn-seconds are mutually exclusive");
		for (i = 0; i < sizeof(excl) / sizeof(excl[0]); i++)
			if (GIVEN(excl[i].opt))
				bad_usage("%s cannot be combined with --churn/--churn-seconds",
					  excl[i].name);
		return;
	}
	if (GIVEN(OPT_CHURN_STATES))
		bad_usage("--churn-states needs --churn or --churn-seconds");
	if (GIVEN(OPT_CHURN_RATE))
		bad_usage("--churn-rate needs --churn or --churn-seconds");

	if (o->pairs && o->type == IBV_QPT_UD)
		bad_usage("--pairs needs a connected QP type (rc or uc)");
	if (o->pairs && o->qps > 2000000)
		bad_usage("--qps: too many pairs");

	if (o->conn == CONN_CM) {
		if (!o->pairs)
			bad_usage("--connect cm needs --pairs");
		if (!GIVEN(OPT_ADDR))
			bad_usage("--connect cm needs --addr");
		if (o->type != IBV_QPT_RC)
			bad_usage("--connect cm supports --type rc only");
		if (GIVEN(OPT_GID))
			bad_usage("--gid-index is not used with --connect cm");
		if (GIVEN(OPT_TO) && o->to != IBV_QPS_RTS && o->to != IBV_QPS_ERR)
			bad_usage("--connect cm supports --to RTS or ERR only");
	} else {
		if (GIVEN(OPT_ADDR) || GIVEN(OPT_CMPORT) || GIVEN(OPT_TIMEOUT))
			bad_usage("--addr/--cm-port/--timeout-ms need --connect cm");
	}

	if (!GIVEN(OPT_TO))
		o->to = o->pairs ? IBV_QPS_RTS : IBV_QPS_INIT;
#undef GIVEN
}

/* ------------------------------------------------------------------ */
/* Signals and waiting                                                 */

static void on_signal(int signo)
{
	g_signal = signo;
}

static void setup_signals(struct app *a)
{
	struct sigaction sa;
	sigset_t block;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;	/* ppoll() still returns EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &a->waitmask);
	sigdelset(&a->waitmask, SIGINT);
	sigdelset(&a->waitmask, SIGTERM);
}

/*
 * ppoll() with SIGINT/SIGTERM deliverable only while sleeping.
 * timeout_us < 0 waits forever. Returns ppoll()'s result; EINTR is
 * reported as 0 (the caller checks g_signal).
 */
static int wait_fds(struct app *a, struct pollfd *pfd, nfds_t n,
		    int64_t timeout_us)
{
	struct timespec ts = us_to_ts(timeout_us);
	int r;

	r = ppoll(pfd, n, timeout_us < 0 ? NULL : &ts, &a->waitmask);
	if (r < 0) {
		if (errno == EINTR)
			return 0;
		fail(a, "ppoll", NO_QPN, errno, NULL);
	}
	return r;
}

static void set_nonblock(struct app *a, int fd, const char *what)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		fail(a, "fcntl O_NONBLOCK", NO_QPN, errno, what);
}

/* ------------------------------------------------------------------ */
/* Async events                                                        */

static void handle_async(struct app *a, struct ibv_async_event *ev)
{
	int64_t t = now_us();
	struct line l;
	struct qpent *e = NULL;
	bool has_qp = false;
	uint32_t qpn = 0;

	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		if (ev->element.qp) {
			has_qp = true;
			qpn = ev->element.qp->qp_num;
			e = ev->element.qp->qp_context;
		}
		break;
	default:
		break;
	}

	if (e && e->err_by_us &&
	    ev->event_type == IBV_EVENT_QP_LAST_WQE_REACHED) {
		if (e->lastwqe_after_err == 0)
			e->lastwqe_first_us = t - e->t_err_us;
		e->lastwqe_after_err++;
	}
	a->async_count++;
	if (a->count_only)
		return;

	l_begin(&l, "async");
	l_str(&l, "type", event_name(ev->event_type));
	l_int(&l, "code", (int)ev->event_type);
	if (has_qp) {
		l_int(&l, "qpn", qpn);
		if (e && e->err_by_us)
			l_int(&l, "us_after_err", t - e->t_err_us);
	}
	switch (ev->event_type) {
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		l_bool(&l, "srq", true);
		if (ev->element.srq && ev->element.srq == a->srq &&
		    a->srqn_known)
			l_int(&l, "srqn", a->srqn);
		break;
	case IBV_EVENT_CQ_ERR:
		l_bool(&l, "cq", true);
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		l_int(&l, "port", ev->element.port_num);
		break;
	case IBV_EVENT_WQ_FATAL:
		if (ev->element.wq)
			l_int(&l, "wq_num", ev->element.wq->wq_num);
		break;
	default:
		break;
	}
	l_int(&l, "t_us", t);
	l_emit(&l);
}

/* Read, report and acknowledge every async event that is queued now. */
static void pump_async(struct app *a)
{
	struct ibv_async_event ev;

	for (;;) {
		errno = 0;
		if (ibv_get_async_event(a->ctx, &ev)) {
			if (errno == EAGAIN || errno == EWOULDBLOCK ||
			    errno == EINTR)
				return;
			fail(a, "ibv_get_async_event", NO_QPN, err_of(-1), NULL);
		}
		/* Copy everything we need before the ack (inside handle). */
		handle_async(a, &ev);
		ibv_ack_async_event(&ev);
	}
}

/* Sleep up to timeout_us while servicing async events. */
static void wait_async(struct app *a, int64_t timeout_us)
{
	struct pollfd pfd = { .fd = a->ctx->async_fd, .events = POLLIN };

	if (wait_fds(a, &pfd, 1, timeout_us) > 0)
		pump_async(a);
}

/* Service async events for exactly ms milliseconds (0: just drain). */
static void grace_period(struct app *a, int ms)
{
	int64_t end = now_us() + (int64_t)ms * 1000;
	int64_t left;

	pump_async(a);
	while ((left = end - now_us()) > 0)
		wait_async(a, left);
	pump_async(a);
}

/* ------------------------------------------------------------------ */
/* Device, GID and shared resources                                    */

static void open_device(struct app *a)
{
	int n = 0, i, ret;
	struct line l;

	if (a->o.conn == CONN_CM) {
		/* librdmacm owns one context per device; use that one so the
		 * PD/CQ/SRQ live on the same context as the cm ids. */
		errno = 0;
		a->cm_devs = rdma_get_devices(&n);
		if (!a->cm_devs)
			fail(a, "rdma_get_devices", NO_QPN, errno ? errno : ENODEV, NULL);
		for (i = 0; i < n; i++)
			if (!strcmp(ibv_get_device_name(a->cm_devs[i]->device),
				    a->o.dev))
				a->ctx = a->cm_devs[i];
	} else {
		struct ibv_device **list;

		errno = 0;
		list = ibv_get_device_list(&n);
		if (!list)
			fail(a, "ibv_get_device_list", NO_QPN, errno ? errno : ENODEV, NULL);
		for (i = 0; i < n; i++) {
			if (strcmp(ibv_get_device_name(list[i]), a->o.dev))
				continue;
			a->ctx = ibv_open_device(list[i]);
			if (!a->ctx)
				fail(a, "ibv_open_device", NO_QPN, err_of(-1), a->o.dev);
			break;
		}
		ibv_free_device_list(list);
	}
	if (!a->ctx)
		fail(a, "open device", NO_QPN, ENODEV, "no such ibv device");

	ret = ibv_query_device(a->ctx, &a->dattr);
	if (ret)
		fail(a, "ibv_query_device", NO_QPN, err_of(ret), NULL);
	if (a->o.port > a->dattr.phys_port_cnt)
		fail(a, "check port", NO_QPN, EINVAL, "--port beyond phys_port_cnt");
	ret = ibv_query_port(a->ctx, (uint8_t)a->o.port, &a->pattr);
	if (ret)
		fail(a, "ibv_query_port", NO_QPN, err_of(ret), NULL);

	set_nonblock(a, a->ctx->async_fd, "async_fd");

	l_begin(&l, "device");
	l_str(&l, "dev", a->o.dev);
	l_str(&l, "transport", transport_name(a->ctx->device->transport_type));
	l_str(&l, "link_layer", link_layer_name(a->pattr.link_layer));
	l_str(&l, "port_state", ibv_port_state_str(a->pattr.state));
	l_int(&l, "max_qp", a->dattr.max_qp);
	l_int(&l, "max_qp_wr", a->dattr.max_qp_wr);
	l_int(&l, "max_cqe", a->dattr.max_cqe);
	l_int(&l, "max_srq", a->dattr.max_srq);
	l_int(&l, "max_srq_wr", a->dattr.max_srq_wr);
	l_int(&l, "gid_tbl_len", a->pattr.gid_tbl_len);
	l_emit(&l);
}

static bool gid_is_zero(const union ibv_gid *g)
{
	static const uint8_t zero[16];

	return !memcmp(g->raw, zero, sizeof(zero));
}

static bool gid_is_v4mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					    0xff, 0xff };

	return !memcmp(g->raw, prefix, sizeof(prefix));
}

/* Returns false for empty or unreadable entries. */
static bool query_gid_entry(struct app *a, int idx, union ibv_gid *gid,
			    uint32_t *type, bool *type_known)
{
	struct ibv_gid_entry ent;
	int ret;

	memset(&ent, 0, sizeof(ent));
	ret = ibv_query_gid_ex(a->ctx, (uint32_t)a->o.port, (uint32_t)idx,
			       &ent, 0);
	if (ret == 0) {
		*gid = ent.gid;
		*type = ent.gid_type;
		*type_known = true;
		return !gid_is_zero(gid);
	}
	if (ret == ENODATA)
		return false;
	/* Fall back to the plain query (no type information). */
	if (ibv_query_gid(a->ctx, (uint8_t)a->o.port, idx, gid))
		return false;
	*type_known = false;
	*type = 0;
	return !gid_is_zero(gid);
}

static void select_gid(struct app *a)
{
	union ibv_gid gid, first_gid;
	uint32_t type = 0, first_type = 0;
	bool tk = false, first_tk = false;
	int first = -1, best = -1, i;
	char str[INET6_ADDRSTRLEN];
	struct line l;

	memset(&gid, 0, sizeof(gid));
	memset(&first_gid, 0, sizeof(first_gid));
	if (a->o.gid_index >= 0) {
		if (a->o.gid_index >= a->pattr.gid_tbl_len)
			fail(a, "check gid index", NO_QPN, EINVAL,
			     "--gid-index beyond the port's GID table");
		if (!query_gid_entry(a, a->o.gid_index, &gid, &type, &tk))
			fail(a, "ibv_query_gid", NO_QPN, ENODATA,
			     "--gid-index names an empty GID entry");
		best = a->o.gid_index;
	} else {
		for (i = 0; i < a->pattr.gid_tbl_len; i++) {
			if (!query_gid_entry(a, i, &gid, &type, &tk))
				continue;
			if (first < 0) {
				first = i;
				first_gid = gid;
				first_type = type;
				first_tk = tk;
			}
			if (a->pattr.link_layer == IBV_LINK_LAYER_ETHERNET &&
			    tk && type == IBV_GID_TYPE_ROCE_V2 &&
			    gid_is_v4mapped(&gid)) {
				best = i;
				break;
			}
		}
		if (best < 0 && first >= 0) {
			best = first;
			gid = first_gid;
			type = first_type;
			tk = first_tk;
		}
	}
	if (best < 0) {
		warn_line("no usable GID found; verbs connections will fail");
		a->have_gid = false;
		a->gid_index = 0;
		memset(&a->gid, 0, sizeof(a->gid));
		return;
	}
	a->have_gid = true;
	a->gid_index = best;
	a->gid = gid;

	if (!inet_ntop(AF_INET6, gid.raw, str, sizeof(str)))
		snprintf(str, sizeof(str), "?");
	l_begin(&l, "gid");
	l_int(&l, "index", best);
	l_str(&l, "gid", str);
	l_str(&l, "type", tk ? gid_type_name(type) : "unknown");
	l_emit(&l);
}

static int clamp_int(long v, long lo, long hi)
{
	if (v > hi)
		v = hi;
	if (v < lo)
		v = lo;
	return (int)v;
}

static void post_srq_recvs(struct app *a, int count)
{
	int i, ret;

	for (i = 0; i < count; i++) {
		struct ibv_sge sge = {
			.addr = (uintptr_t)a->buf + (uint64_t)i * QPW_RECV_LEN,
			.length = QPW_RECV_LEN,
			.lkey = a->mr->lkey,
		};
		struct ibv_recv_wr wr = {
			.wr_id = QPW_RECV_WRID | (uint64_t)i,
			.sg_list = &sge,
			.num_sge = 1,
		};
		struct ibv_recv_wr *bad = NULL;

		ret = ibv_post_srq_recv(a->srq, &wr, &bad);
		if (ret)
			fail(a, "ibv_post_srq_recv", NO_QPN, err_of(ret), NULL);
	}
}

static void create_shared(struct app *a, long total_qps)
{
	int ret, cqe;

	a->pd = ibv_alloc_pd(a->ctx);
	if (!a->pd)
		fail(a, "ibv_alloc_pd", NO_QPN, err_of(-1), NULL);

	ret = posix_memalign(&a->buf, QPW_BUF_SIZE, QPW_BUF_SIZE);
	if (ret)
		fail(a, "posix_memalign", NO_QPN, ret, NULL);
	memset(a->buf, 0, QPW_BUF_SIZE);
	a->mr = ibv_reg_mr(a->pd, a->buf, QPW_BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	if (!a->mr)
		fail(a, "ibv_reg_mr", NO_QPN, err_of(-1), NULL);

	/*
	 * Markers are drained one QP at a time and nothing else completes on
	 * this CQ (no receives are posted to private RQs; SRQ receives are
	 * not flushed by a QP going to ERR), so one CQ always suffices.
	 */
	cqe = clamp_int(total_qps + 64, 1,
			a->dattr.max_cqe > 0 ? a->dattr.max_cqe : 1);
	a->cq = ibv_create_cq(a->ctx, cqe, NULL, NULL, 0);
	if (!a->cq)
		fail(a, "ibv_create_cq", NO_QPN, err_of(-1), NULL);

	if (a->o.srq) {
		struct ibv_srq_init_attr sia;
		uint32_t num = 0;

		if (a->dattr.max_srq <= 0 || a->dattr.max_srq_wr <= 0)
			fail(a, "ibv_create_srq", NO_QPN, EOPNOTSUPP,
			     "device reports no SRQ support");
		memset(&sia, 0, sizeof(sia));
		sia.attr.max_wr = (uint32_t)clamp_int(QPW_SRQ_WR, 1, a->dattr.max_srq_wr);
		sia.attr.max_sge = 1;
		sia.attr.srq_limit = 0;
		a->srq = ibv_create_srq(a->pd, &sia);
		if (!a->srq)
			fail(a, "ibv_create_srq", NO_QPN, err_of(-1), NULL);
		post_srq_recvs(a, clamp_int(QPW_SRQ_PREPOST, 1, sia.attr.max_wr));

		/* Only XRC SRQs have a number through verbs; basic SRQs
		 * normally fail here and the Go side joins via netlink. */
		if (ibv_get_srq_num(a->srq, &num) == 0) {
			a->srqn = num;
			a->srqn_known = true;
		}
	}
}

static void fill_qp_init_attr(struct app *a, struct ibv_qp_init_attr *ia,
			      struct qpent *qp_context)
{
	struct ibv_srq *srq = a->srq;

	if (qp_context && !qp_context->on_srq)
		srq = NULL;
	int wr = clamp_int(QPW_QP_WR, 1, a->dattr.max_qp_wr > 0 ?
			   a->dattr.max_qp_wr : QPW_QP_WR);
	int sge = clamp_int(1, 1, a->dattr.max_sge > 0 ? a->dattr.max_sge : 1);

	memset(ia, 0, sizeof(*ia));
	ia->qp_context = qp_context;
	ia->send_cq = a->cq;
	ia->recv_cq = a->cq;
	ia->srq = srq;
	ia->cap.max_send_wr = (uint32_t)wr;
	ia->cap.max_send_sge = (uint32_t)sge;
	ia->cap.max_recv_wr = srq ? 0 : (uint32_t)wr;
	ia->cap.max_recv_sge = srq ? 0 : (uint32_t)sge;
	ia->cap.max_inline_data = 0;
	ia->qp_type = a->o.type;
	ia->sq_sig_all = 0;
}

static struct ibv_ah *marker_ah(struct app *a)
{
	struct ibv_ah_attr at;

	if (a->ah)
		return a->ah;
	if (!a->have_gid) {
		errno = ENOENT;
		return NULL;
	}
	memset(&at, 0, sizeof(at));
	at.is_global = 1;
	at.grh.dgid = a->gid;
	at.grh.sgid_index = (uint8_t)a->gid_index;
	at.grh.hop_limit = 1;
	at.dlid = a->pattr.lid;
	at.port_num = (uint8_t)a->o.port;
	a->ah = ibv_create_ah(a->pd, &at);
	return a->ah;
}

/* ------------------------------------------------------------------ */
/* QP state transitions                                                */

static int modify_init(struct app *a, struct ibv_qp *qp)
{
	struct ibv_qp_attr at;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.pkey_index = 0;
	at.port_num = (uint8_t)a->o.port;
	if (a->o.type == IBV_QPT_UD) {
		at.qkey = QPW_QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
				     IBV_ACCESS_REMOTE_WRITE;
		if (a->o.type == IBV_QPT_RC)
			at.qp_access_flags |= IBV_ACCESS_REMOTE_READ;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return ibv_modify_qp(qp, &at, mask);
}

static int modify_rtr(struct app *a, struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr at;
	int mask = IBV_QP_STATE;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	if (a->o.type != IBV_QPT_UD) {
		at.path_mtu = QPW_PATH_MTU;
		if (a->pattr.active_mtu && a->pattr.active_mtu < at.path_mtu)
			at.path_mtu = a->pattr.active_mtu;
		at.dest_qp_num = dest_qpn;
		at.rq_psn = QPW_PSN;
		at.ah_attr.is_global = 1;
		at.ah_attr.grh.dgid = a->gid;		/* loopback: our own GID */
		at.ah_attr.grh.sgid_index = (uint8_t)a->gid_index;
		at.ah_attr.grh.hop_limit = 1;
		at.ah_attr.dlid = a->pattr.lid;		/* 0 on RoCE */
		at.ah_attr.sl = 0;
		at.ah_attr.src_path_bits = 0;
		at.ah_attr.port_num = (uint8_t)a->o.port;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
		if (a->o.type == IBV_QPT_RC) {
			at.max_dest_rd_atomic = 1;
			at.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	return ibv_modify_qp(qp, &at, mask);
}

static int modify_rts(struct app *a, struct ibv_qp *qp)
{
	struct ibv_qp_attr at;
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.sq_psn = QPW_PSN;
	if (a->o.type == IBV_QPT_RC) {
		at.timeout = 14;
		at.retry_cnt = 7;
		at.rnr_retry = 7;
		at.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &at, mask);
}

static int modify_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr at;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &at, IBV_QP_STATE);
}

/* Move one tracked QP to ERR, time-stamp it and report it. */
static void move_to_err(struct app *a, struct qpent *e)
{
	enum ibv_qp_state from = e->state;
	int64_t t = now_us();
	int ret;
	struct line l;

	ret = modify_err(e->qp);
	if (ret)
		fail(a, "ibv_modify_qp ERR", e->qpn, err_of(ret), NULL);
	e->state = IBV_QPS_ERR;
	e->err_by_us = true;
	e->t_err_us = t;
	e->lastwqe_after_err = 0;
	e->lastwqe_first_us = 0;
	if (!a->o.quiet) {
		l_begin(&l, "err");
		l_int(&l, "qpn", e->qpn);
		l_str(&l, "from", qp_state_name(from));
		l_int(&l, "t_us", t);
		l_emit(&l);
	}
}

/* ------------------------------------------------------------------ */
/* Setup: raw verbs                                                    */

/* Every QP, through ibv_create_qp. */
SITE_FN static void create_qps_verbs(struct app *a)
{
	long i;

	for (i = 0; i < a->nq; i++) {
		struct qpent *e = &a->q[i];
		struct ibv_qp_init_attr ia;

		e->on_srq = a->srq && (a->o.srq_every <= 1 || i % a->o.srq_every == 0);
		fill_qp_init_attr(a, &ia, e);
		e->qp = ibv_create_qp(a->pd, &ia);
		if (!e->qp)
			fail(a, "ibv_create_qp", NO_QPN, err_of(-1), NULL);
		e->qpn = e->qp->qp_num;
		e->state = IBV_QPS_RESET;
		a->created++;
	}
}

static void setup_verbs(struct app *a, int64_t *create_us)
{
	enum ibv_qp_state to = a->o.to;
	bool connected_type = a->o.type != IBV_QPT_UD;
	bool reach_init, reach_rtr, reach_rts;
	int64_t t0;
	long i;
	int ret;

	/* ERR goes through RTS only when the QPs can be connected. */
	reach_init = to != IBV_QPS_RESET;
	reach_rtr = to == IBV_QPS_RTR || to == IBV_QPS_RTS ||
		    (to == IBV_QPS_ERR && a->o.pairs);
	reach_rts = to == IBV_QPS_RTS || (to == IBV_QPS_ERR && a->o.pairs);

	t0 = now_us();
	create_qps_verbs(a);
	*create_us = now_us() - t0;

	for (i = 0; i < a->nq; i++) {
		struct qpent *e = &a->q[i];

		if (a->o.pairs)
			e->peer = i ^ 1;
		else if (connected_type && reach_rtr)
			e->peer = i;	/* connected to itself */
		else
			e->peer = -1;
	}

	if (reach_init) {
		for (i = 0; i < a->nq; i++) {
			struct qpent *e = &a->q[i];

			ret = modify_init(a, e->qp);
			if (ret)
				fail(a, "ibv_modify_qp INIT", e->qpn, err_of(ret), NULL);
			e->state = IBV_QPS_INIT;
			if (!a->o.batch)
				pump_async(a);
		}
	}
	if (reach_rtr) {
		for (i = 0; i < a->nq; i++) {
			struct qpent *e = &a->q[i];
			uint32_t dest = e->peer >= 0 ? a->q[e->peer].qpn : 0;

			ret = modify_rtr(a, e->qp, dest);
			if (ret)
				fail(a, "ibv_modify_qp RTR", e->qpn, err_of(ret), NULL);
			e->state = IBV_QPS_RTR;
			e->connected = connected_type && e->peer >= 0;
			if (!a->o.batch)
				pump_async(a);
		}
	}
	if (reach_rts) {
		for (i = 0; i < a->nq; i++) {
			struct qpent *e = &a->q[i];

			ret = modify_rts(a, e->qp);
			if (ret)
				fail(a, "ibv_modify_qp RTS", e->qpn, err_of(ret), NULL);
			e->state = IBV_QPS_RTS;
			if (!a->o.batch)
				pump_async(a);
		}
	}
	if (to == IBV_QPS_ERR) {
		for (i = 0; i < a->nq; i++) {
			move_to_err(a, &a->q[i]);
			if (!a->o.batch)
				pump_async(a);
		}
	}
}

/* ------------------------------------------------------------------ */
/* Setup: librdmacm                                                    */

struct cm_ev {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
};

/* Next CM event (already acknowledged) or fail at the deadline. */
static struct cm_ev cm_next_event(struct app *a, int64_t deadline,
				  long pair)
{
	struct rdma_cm_event *ev;
	struct cm_ev out;
	char detail[96];

	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = a->ech->fd, .events = POLLIN },
			{ .fd = a->ctx->async_fd, .events = POLLIN },
		};
		int64_t left;

		errno = 0;
		if (rdma_get_cm_event(a->ech, &ev) == 0)
			break;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			fail(a, "rdma_get_cm_event", NO_QPN, err_of(-1), NULL);
		left = deadline - now_us();
		if (left <= 0) {
			snprintf(detail, sizeof(detail),
				 "no CM event within --timeout-ms for pair %ld",
				 pair);
			fail(a, "rdma_get_cm_event", NO_QPN, ETIMEDOUT, detail);
		}
		if (wait_fds(a, pfd, 2, left) > 0 && pfd[1].revents)
			pump_async(a);
	}
	out.type = ev->event;
	out.status = ev->status;
	out.id = ev->id;
	out.listen_id = ev->listen_id;
	rdma_ack_cm_event(ev);
	return out;
}

/* One QP on a CM id, through rdma_create_qp. */
SITE_FN static void create_qp_rdmacm(struct app *a, struct qpent *e)
{
	struct ibv_qp_init_attr ia;

	if (e->id->verbs != a->ctx)
		fail(a, "rdma_create_qp", NO_QPN, EXDEV,
		     "cm id is bound to a different verbs context than --dev");
	e->on_srq = a->srq && (a->o.srq_every <= 1 || e->idx % a->o.srq_every == 0);
	fill_qp_init_attr(a, &ia, e);
	if (rdma_create_qp(e->id, a->pd, &ia))
		fail(a, "rdma_create_qp", NO_QPN, err_of(-1), NULL);
	e->qp = e->id->qp;
	e->qpn = e->qp->qp_num;
	e->state = IBV_QPS_INIT;	/* librdmacm moves it to INIT */
	a->created++;
}

static void cm_conn_param(struct rdma_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

static void cm_connect_pair(struct app *a, long pair)
{
	struct qpent *c = &a->q[2 * pair], *s = &a->q[2 * pair + 1];
	struct sockaddr_in src, dst;
	struct rdma_conn_param cp;
	int64_t deadline;
	bool c_est = false, s_est = false;
	char detail[160];

	if (rdma_create_id(a->ech, &c->id, c, RDMA_PS_TCP))
		fail(a, "rdma_create_id", NO_QPN, err_of(-1), NULL);

	memset(&src, 0, sizeof(src));
	src.sin_family = AF_INET;
	src.sin_addr = a->o.addr;
	dst = src;
	dst.sin_port = htons(a->cm_port);
	deadline = now_us() + (int64_t)a->o.timeout_ms * 1000;

	if (rdma_resolve_addr(c->id, (struct sockaddr *)&src,
			      (struct sockaddr *)&dst, a->o.timeout_ms))
		fail(a, "rdma_resolve_addr", NO_QPN, err_of(-1), NULL);

	while (!(c_est && s_est)) {
		struct cm_ev ev = cm_next_event(a, deadline, pair);

		switch (ev.type) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (ev.id != c->id)
				goto unexpected;
			if (rdma_resolve_route(c->id, a->o.timeout_ms))
				fail(a, "rdma_resolve_route", NO_QPN, err_of(-1), NULL);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			if (ev.id != c->id)
				goto unexpected;
			create_qp_rdmacm(a, c);
			cm_conn_param(&cp);
			if (rdma_connect(c->id, &cp))
				fail(a, "rdma_connect", c->qpn, err_of(-1), NULL);
			break;
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			if (ev.listen_id != a->listen || s->id)
				goto unexpected;
			s->id = ev.id;
			s->id->context = s;
			create_qp_rdmacm(a, s);
			cm_conn_param(&cp);
			if (rdma_accept(s->id, &cp))
				fail(a, "rdma_accept", s->qpn, err_of(-1), NULL);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (ev.id == c->id)
				c_est = true;
			else if (s->id && ev.id == s->id)
				s_est = true;
			else
				goto unexpected;
			break;
		default:
			goto unexpected;
		}
		continue;
unexpected:
		snprintf(detail, sizeof(detail),
			 "unexpected %s (status %d) while connecting pair %ld",
			 rdma_event_str(ev.type), ev.status, pair);
		/* status is -errno for most events; for REJECTED it is the
		 * transport's reject reason. */
		fail(a, "rdma_cm", NO_QPN,
		     ev.status < 0 ? -ev.status :
		     ev.type == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : EPROTO,
		     detail);
	}

	c->peer = 2 * pair + 1;
	s->peer = 2 * pair;
	c->connected = s->connected = true;
	c->state = s->state = IBV_QPS_RTS;
}

/* The event channel and the listening id, on --addr. */
static void cm_listen(struct app *a)
{
	struct sockaddr_in sin;
	char addr[INET_ADDRSTRLEN];
	struct line l;

	a->ech = rdma_create_event_channel();
	if (!a->ech)
		fail(a, "rdma_create_event_channel", NO_QPN, err_of(-1), NULL);
	set_nonblock(a, a->ech->fd, "cm event channel");

	if (rdma_create_id(a->ech, &a->listen, NULL, RDMA_PS_TCP))
		fail(a, "rdma_create_id", NO_QPN, err_of(-1), "listen");
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr = a->o.addr;
	sin.sin_port = htons((uint16_t)a->o.cm_port);
	if (rdma_bind_addr(a->listen, (struct sockaddr *)&sin))
		fail(a, "rdma_bind_addr", NO_QPN, err_of(-1), NULL);
	if (!a->listen->verbs)
		fail(a, "rdma_bind_addr", NO_QPN, EADDRNOTAVAIL,
		     "--addr is not an address of an RDMA device");
	if (a->listen->verbs != a->ctx)
		fail(a, "rdma_bind_addr", NO_QPN, EXDEV,
		     "--addr belongs to another RDMA device than --dev");
	if (rdma_listen(a->listen, 128))
		fail(a, "rdma_listen", NO_QPN, err_of(-1), NULL);
	a->cm_port = ntohs(rdma_get_src_port(a->listen));

	if (!inet_ntop(AF_INET, &a->o.addr, addr, sizeof(addr)))
		snprintf(addr, sizeof(addr), "?");
	l_begin(&l, "cm_listen");
	l_str(&l, "addr", addr);
	l_int(&l, "port", a->cm_port);
	l_emit(&l);
}

static void setup_cm(struct app *a, int64_t *create_us)
{
	int64_t t0 = now_us();
	long p;

	cm_listen(a);
	for (p = 0; p < a->nq / 2; p++)
		cm_connect_pair(a, p);
	*create_us = now_us() - t0;

	if (a->o.to == IBV_QPS_ERR) {
		long i;

		for (i = 0; i < a->nq; i++) {
			move_to_err(a, &a->q[i]);
			if (!a->o.batch)
				pump_async(a);
		}
	}
}

/* ------------------------------------------------------------------ */
/* Reporting                                                           */

static void print_qp(struct app *a, const struct qpent *e)
{
	struct line l;

	l_begin(&l, "qp");
	l_int(&l, "qpn", e->qpn);
	l_str(&l, "type", qp_type_name(a->o.type));
	l_str(&l, "state", qp_state_name(e->state));
	l_int(&l, "srqn", e->on_srq && a->srqn_known ? a->srqn : 0);
	if (e->on_srq && !a->srqn_known)
		l_bool(&l, "srqn_known", false);
	l_bool(&l, "srq", e->on_srq);
	l_int(&l, "peer_qpn", e->connected && e->peer >= 0 ?
			      a->q[e->peer].qpn : 0);
	l_str(&l, "dev", a->o.dev);
	l_int(&l, "index", e->idx);
	l_emit(&l);
}

/* ------------------------------------------------------------------ */
/* Hold                                                                */

static void hold(struct app *a)
{
	const char *reason;
	int64_t deadline = now_us() + (int64_t)(a->o.hold * 1e6);
	bool stdin_open = a->o.hold_stdin;
	int signo = 0;
	struct line l;

	if (!a->o.hold_stdin && a->o.hold <= 0) {
		pump_async(a);
		g_signal = 0;
		return;
	}

	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = a->ctx->async_fd, .events = POLLIN },
			{ .fd = STDIN_FILENO, .events = POLLIN },
		};
		int64_t left = -1;

		if (g_signal) {
			signo = g_signal;
			reason = "signal";
			break;
		}
		if (!a->o.hold_stdin) {
			left = deadline - now_us();
			if (left <= 0) {
				reason = "timeout";
				break;
			}
		}
		if (a->o.hold_stdin && !stdin_open) {
			reason = "eof";
			break;
		}
		if (wait_fds(a, pfd, stdin_open ? 2 : 1, left) <= 0)
			continue;
		if (pfd[0].revents)
			pump_async(a);
		if (stdin_open && pfd[1].revents) {
			char buf[512];
			ssize_t n;

			if (pfd[1].revents & POLLNVAL) {
				stdin_open = false;
				continue;
			}
			n = read(STDIN_FILENO, buf, sizeof(buf));
			if (n == 0 || (n < 0 && errno != EAGAIN &&
				       errno != EINTR))
				stdin_open = false;
		}
	}
	pump_async(a);
	g_signal = 0;

	l_begin(&l, "hold_end");
	l_str(&l, "reason", reason);
	if (signo)
		l_int(&l, "signo", signo);
	l_emit(&l);
}

/* ------------------------------------------------------------------ */
/* Teardown                                                            */

/*
 * Wait for LAST_WQE_REACHED on e since our ERR. timeout_ms < 0 waits
 * forever; then SIGINT/SIGTERM abort the program without destroying.
 */
static bool wait_last_wqe(struct app *a, struct qpent *e, int timeout_ms)
{
	int64_t deadline = now_us() + (int64_t)timeout_ms * 1000;
	struct line l;

	for (;;) {
		int64_t left = -1;

		pump_async(a);
		if (e->lastwqe_after_err > 0) {
			l_begin(&l, "last_wqe");
			l_int(&l, "qpn", e->qpn);
			l_bool(&l, "received", true);
			l_int(&l, "us_after_err", e->lastwqe_first_us);
			l_emit(&l);
			return true;
		}
		if (timeout_ms >= 0) {
			left = deadline - now_us();
			if (left <= 0) {
				l_begin(&l, "last_wqe");
				l_int(&l, "qpn", e->qpn);
				l_bool(&l, "received", false);
				l_int(&l, "timeout_ms", timeout_ms);
				l_emit(&l);
				return false;
			}
		} else if (g_signal) {
			int signo = g_signal;

			l_begin(&l, "interrupted");
			l_int(&l, "signo", signo);
			l_str(&l, "phase", "wait_last_wqe");
			l_int(&l, "qpn", e->qpn);
			l_emit(&l);
			fprintf(stderr, PROG ": signal %d while waiting for "
				"LAST_WQE_REACHED on qpn %u; exiting without "
				"destroying\n", signo, e->qpn);
			exit(128 + signo);
		}
		wait_async(a, left);
	}
}

/* Post a signalled marker send and poll the CQ for its completion. */
static void drain_marker(struct app *a, struct qpent *e)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)a->buf,
		.length = QPW_MARKER_LEN,
		.lkey = a->mr->lkey,
	};
	struct ibv_send_wr wr, *bad = NULL;
	uint64_t wrid = QPW_MARKER_WRID | e->qpn;
	int64_t t_post, deadline;
	struct line l;
	int ret;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wrid;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (a->o.type == IBV_QPT_UD) {
		wr.wr.ud.ah = marker_ah(a);
		if (!wr.wr.ud.ah) {
			int err = err_of(-1);

			l_begin(&l, "drained");
			l_int(&l, "qpn", e->qpn);
			l_bool(&l, "completed", false);
			l_bool(&l, "posted", false);
			l_str(&l, "op", "ibv_create_ah");
			l_int(&l, "errno", err);
			l_str(&l, "msg", strerror(err));
			l_emit(&l);
			return;
		}
		wr.wr.ud.remote_qpn = e->qpn;
		wr.wr.ud.remote_qkey = QPW_QKEY;
	}

	t_post = now_us();
	ret = ibv_post_send(e->qp, &wr, &bad);
	if (ret) {
		int err = err_of(ret);

		l_begin(&l, "drained");
		l_int(&l, "qpn", e->qpn);
		l_bool(&l, "completed", false);
		l_bool(&l, "posted", false);
		l_str(&l, "op", "ibv_post_send");
		l_int(&l, "errno", err);
		l_str(&l, "msg", strerror(err));
		l_emit(&l);
		return;
	}

	deadline = t_post + (int64_t)a->o.drain_timeout_ms * 1000;
	for (;;) {
		struct ibv_wc wc[16];
		int n, i;

		n = ibv_poll_cq(a->cq, 16, wc);
		if (n < 0)
			fail(a, "ibv_poll_cq", e->qpn, EIO, NULL);
		for (i = 0; i < n; i++) {
			int64_t t = now_us();

			if (wc[i].wr_id != wrid || wc[i].qp_num != e->qpn) {
				a->stray_wc++;
				continue;
			}
			l_begin(&l, "drained");
			l_int(&l, "qpn", e->qpn);
			l_bool(&l, "completed", true);
			l_str(&l, "wc_status", wc_status_name(wc[i].status));
			l_int(&l, "wc_status_code", wc[i].status);
			l_int(&l, "us_after_post", t - t_post);
			if (e->err_by_us)
				l_int(&l, "us_after_err", t - e->t_err_us);
			l_emit(&l);
			return;
		}
		if (n > 0)
			continue;
		if (now_us() >= deadline) {
			l_begin(&l, "drained");
			l_int(&l, "qpn", e->qpn);
			l_bool(&l, "completed", false);
			l_bool(&l, "posted", true);
			l_int(&l, "timeout_ms", a->o.drain_timeout_ms);
			l_emit(&l);
			return;
		}
		/* Short sleep that also services async events. */
		wait_async(a, QPW_DRAIN_SLEEP_US);
	}
}

static void destroy_qp(struct app *a, struct qpent *e)
{
	struct line l;
	int ret;

	pump_async(a);	/* never destroy with an unread event pending */
	ret = ibv_destroy_qp(e->qp);
	if (ret)
		fail(a, "ibv_destroy_qp", e->qpn, err_of(ret), NULL);
	e->qp = NULL;
	if (e->id) {
		/* Equivalent of rdma_destroy_qp(), which cannot report
		 * errors; our CQs are not owned by the id. */
		e->id->qp = NULL;
		if (rdma_destroy_id(e->id))
			fail(a, "rdma_destroy_id", e->qpn, err_of(-1), NULL);
		e->id = NULL;
	}
	if (!a->o.quiet) {
		l_begin(&l, "destroyed");
		l_int(&l, "qpn", e->qpn);
		l_emit(&l);
	}
}

static void teardown_one(struct app *a, struct qpent *e)
{
	switch (a->o.teardown) {
	case TD_SPEC:
		if (e->state != IBV_QPS_ERR)
			move_to_err(a, e);
		if (e->on_srq)	/* only SRQ QPs get LAST_WQE_REACHED */
			wait_last_wqe(a, e, a->o.last_wqe_timeout_ms);
		drain_marker(a, e);
		grace_period(a, a->o.grace_ms);
		break;
	case TD_MARKER:
		if (e->state != IBV_QPS_ERR)
			move_to_err(a, e);
		pump_async(a);
		drain_marker(a, e);
		grace_period(a, a->o.grace_ms);
		break;
	case TD_WAIT:
		if (e->state != IBV_QPS_ERR)
			move_to_err(a, e);
		wait_last_wqe(a, e, -1);	/* returns only on success */
		break;
	case TD_DIRECT:
	case TD_NONE:
		break;
	}
	destroy_qp(a, e);
}

static void release_shared(struct app *a)
{
	int ret;

	pump_async(a);
	if (a->ah) {
		ret = ibv_destroy_ah(a->ah);
		if (ret)
			fail(a, "ibv_destroy_ah", NO_QPN, err_of(ret), NULL);
		a->ah = NULL;
	}
	if (a->srq) {
		ret = ibv_destroy_srq(a->srq);
		if (ret)
			fail(a, "ibv_destroy_srq", NO_QPN, err_of(ret), NULL);
		a->srq = NULL;
	}
	if (a->cq) {
		ret = ibv_destroy_cq(a->cq);
		if (ret)
			fail(a, "ibv_destroy_cq", NO_QPN, err_of(ret), NULL);
		a->cq = NULL;
	}
	if (a->mr) {
		ret = ibv_dereg_mr(a->mr);
		if (ret)
			fail(a, "ibv_dereg_mr", NO_QPN, err_of(ret), NULL);
		a->mr = NULL;
	}
	if (a->pd) {
		ret = ibv_dealloc_pd(a->pd);
		if (ret)
			fail(a, "ibv_dealloc_pd", NO_QPN, err_of(ret), NULL);
		a->pd = NULL;
	}
	if (a->listen) {
		if (rdma_destroy_id(a->listen))
			fail(a, "rdma_destroy_id", NO_QPN, err_of(-1), "listen");
		a->listen = NULL;
	}
	if (a->ech) {
		rdma_destroy_event_channel(a->ech);
		a->ech = NULL;
	}
	if (a->cm_devs) {
		rdma_free_devices(a->cm_devs);
		a->cm_devs = NULL;
		a->ctx = NULL;
	} else if (a->ctx) {
		ret = ibv_close_device(a->ctx);
		if (ret)
			fail(a, "ibv_close_device", NO_QPN, err_of(ret), NULL);
		a->ctx = NULL;
	}
	free(a->buf);
	a->buf = NULL;
}

static void teardown(struct app *a)
{
	int64_t t0 = now_us();
	long i, destroyed = 0;
	struct line l;

	if (a->o.teardown != TD_NONE) {
		for (i = 0; i < a->nq; i++) {
			teardown_one(a, &a->q[i]);
			destroyed++;
		}
	}
	pump_async(a);

	l_begin(&l, "teardown");
	l_str(&l, "mode", teardown_name(a->o.teardown));
	l_int(&l, "destroyed", destroyed);
	l_num(&l, "seconds", (double)(now_us() - t0) / 1e6, 6);
	if (a->stray_wc)
		l_int(&l, "stray_completions", (long long)a->stray_wc);
	l_emit(&l);

	if (a->o.teardown != TD_NONE)
		release_shared(a);
}

/* ------------------------------------------------------------------ */
/* Churn                                                               */

/*
 * A create the device must refuse, through ibv_create_qp: one send work
 * request over the device's max_qp_wr. Returns the create's errno.
 */
SITE_FN static int create_qp_oversized(struct app *a)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp *qp;

	fill_qp_init_attr(a, &ia, NULL);
	ia.cap.max_send_wr = (uint32_t)a->dattr.max_qp_wr + 1;
	errno = 0;
	qp = ibv_create_qp(a->pd, &ia);
	if (qp) {
		ibv_destroy_qp(qp);
		return 0;
	}
	return errno ? errno : EIO;
}

/* --oversized: the creates, one create_failed line each. */
static void run_oversized(struct app *a)
{
	struct line l;
	long i;

	if (a->dattr.max_qp_wr <= 0)
		fail(a, "ibv_query_device", NO_QPN, EINVAL, "no max_qp_wr to exceed");
	l_begin(&l, "oversized_start");
	l_int(&l, "pid", getpid());
	l_int(&l, "max_qp_wr", a->dattr.max_qp_wr);
	l_emit(&l);
	for (i = 0; i < a->o.oversized; i++) {
		int err = create_qp_oversized(a);

		if (!err)
			fail(a, "ibv_create_qp", NO_QPN, EEXIST, "a QP over max_qp_wr was created");
		if (!a->o.quiet) {
			l_begin(&l, "create_failed");
			l_int(&l, "errno", err);
			l_emit(&l);
		}
	}
	l_begin(&l, "oversized");
	l_int(&l, "creates", a->o.oversized);
	l_emit(&l);
}

/* With --hold: a ready line (no QPs held) and the hold. */
static void hold_without_qps(struct app *a)
{
	struct line l;

	if (!a->o.hold_stdin && a->o.hold <= 0)
		return;
	l_begin(&l, "ready");
	l_int(&l, "pid", getpid());
	l_int(&l, "qps", 0);
	if (a->o.reg_mrs > 0)
		l_int(&l, "mrs", a->o.reg_mrs);
	l_str(&l, "dev", a->o.dev);
	l_emit(&l);
	hold(a);
}

/* ------------------------------------------------------------------ */
/* Registered MRs                                                      */

/*
 * --reg-mrs N: N MRs on one PD, each of one page of one anonymous mapping
 * of N pages (MR i registers page i), registered back to back; the
 * reg_mrs line, then with --hold the ready line and the hold, then every
 * MR is deregistered. ibv_reg_mr pins its page: the pages count against
 * RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
 */
static void run_reg_mrs(struct app *a)
{
	long n = a->o.reg_mrs, i;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct ibv_mr **mrs;
	char *buf;
	int64_t t0;
	double secs;
	struct line l;

	if (a->dattr.max_mr > 0 && n > a->dattr.max_mr) {
		char msg[128];

		snprintf(msg, sizeof(msg), "%ld MRs requested, device max_mr is %d; trying anyway",
			 n, a->dattr.max_mr);
		warn_line(msg);
	}
	mrs = calloc((size_t)n, sizeof(*mrs));
	if (!mrs)
		fail(a, "calloc", NO_QPN, ENOMEM, NULL);
	buf = mmap(NULL, (size_t)n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		fail(a, "mmap", NO_QPN, errno, NULL);
	a->pd = ibv_alloc_pd(a->ctx);
	if (!a->pd)
		fail(a, "ibv_alloc_pd", NO_QPN, err_of(-1), NULL);
	t0 = now_us();
	for (i = 0; i < n; i++) {
		mrs[i] = ibv_reg_mr(a->pd, buf + (size_t)i * page, page, IBV_ACCESS_LOCAL_WRITE);
		if (!mrs[i]) {
			char msg[64];

			snprintf(msg, sizeof(msg), "MR %ld of %ld", i, n);
			fail(a, "ibv_reg_mr", NO_QPN, err_of(-1), msg);
		}
	}
	secs = (double)(now_us() - t0) / 1e6;
	l_begin(&l, "reg_mrs");
	l_int(&l, "pid", getpid());
	l_int(&l, "mrs", n);
	l_int(&l, "bytes_each", (long long)page);
	l_num(&l, "seconds", secs, 6);
	l_num(&l, "mrs_per_sec", secs > 0 ? (double)n / secs : 0, 1);
	l_emit(&l);
	hold_without_qps(a);
	for (i = 0; i < n; i++) {
		int ret = ibv_dereg_mr(mrs[i]);

		if (ret)
			fail(a, "ibv_dereg_mr", NO_QPN, err_of(ret), NULL);
	}
	munmap(buf, (size_t)n * page);
	free(mrs);
}

/* ------------------------------------------------------------------ */
/* Reconnect                                                           */

/* A target buffer registered for remote writes, one per connection. */
struct target_mr {
	void *buf;
	struct ibv_mr *mr;
};

static struct target_mr register_target(struct app *a)
{
	struct target_mr t;
	int ret;

	ret = posix_memalign(&t.buf, QPW_BUF_SIZE, QPW_BUF_SIZE);
	if (ret)
		fail(a, "posix_memalign", NO_QPN, ret, NULL);
	memset(t.buf, 0, QPW_BUF_SIZE);
	t.mr = ibv_reg_mr(a->pd, t.buf, QPW_BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!t.mr)
		fail(a, "ibv_reg_mr", NO_QPN, err_of(-1), "target");
	return t;
}

static void deregister_target(struct app *a, struct target_mr *t)
{
	int ret;

	if (!t->mr)
		return;
	ret = ibv_dereg_mr(t->mr);
	if (ret)
		fail(a, "ibv_dereg_mr", NO_QPN, err_of(ret), "target");
	free(t->buf);
	t->mr = NULL;
	t->buf = NULL;
}

/*
 * One signaled RDMA WRITE of 64 bytes from the writer QP to addr with
 * rkey; returns its completion's status (servicing async events while it
 * waits, at most --timeout-ms).
 */
static enum ibv_wc_status rdma_write_once(struct app *a, struct qpent *w, uint64_t addr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)a->buf, .length = 64, .lkey = a->mr->lkey };
	struct ibv_send_wr wr, *bad;
	int64_t deadline = now_us() + (int64_t)a->o.timeout_ms * 1000;
	struct ibv_wc wc;
	int ret, n;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = w->qpn;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	ret = ibv_post_send(w->qp, &wr, &bad);
	if (ret)
		fail(a, "ibv_post_send", w->qpn, err_of(ret), "rdma write");
	for (;;) {
		n = ibv_poll_cq(a->cq, 1, &wc);
		if (n < 0)
			fail(a, "ibv_poll_cq", w->qpn, EIO, NULL);
		if (n == 1 && wc.wr_id == w->qpn)
			return wc.status;
		if (n == 1) {
			a->stray_wc++;
			continue;
		}
		if (now_us() >= deadline)
			fail(a, "ibv_poll_cq", w->qpn, ETIMEDOUT, "no completion of the rdma write within --timeout-ms");
		wait_async(a, 1000);
	}
}

/* Disconnects the pair and waits until both ids say so. */
static void cm_disconnect_pair(struct app *a, struct qpent *c, struct qpent *s)
{
	int64_t deadline = now_us() + (int64_t)a->o.timeout_ms * 1000;
	bool c_done = false, s_done = false;

	if (rdma_disconnect(c->id))
		fail(a, "rdma_disconnect", c->qpn, err_of(-1), NULL);
	while (!(c_done && s_done)) {
		struct cm_ev ev = cm_next_event(a, deadline, 0);

		if (ev.type == RDMA_CM_EVENT_DISCONNECTED && ev.id == c->id) {
			c_done = true;
		} else if (ev.type == RDMA_CM_EVENT_DISCONNECTED && ev.id == s->id) {
			/* The passive side answers (IB CM: the DREP). */
			if (rdma_disconnect(s->id) && errno != EINVAL)
				fail(a, "rdma_disconnect", s->qpn, err_of(-1), "target");
			s_done = true;
		}
		else if (ev.type != RDMA_CM_EVENT_TIMEWAIT_EXIT)
			fail(a, "rdma_cm", NO_QPN, EPROTO, rdma_event_str(ev.type));
	}
	c->state = s->state = IBV_QPS_ERR;	/* rdma_cm moved them there */
}

/* --reconnect: the pair and the target's MRs between cycles. */
struct reconnect {
	struct target_mr *mrs;		/* one per connection, in order */
	long connections;		/* made so far */
	long live;			/* target MRs registered now */
	bool connected;
};

/*
 * Connects the pair (client q[0], target q[1]) anew, and the target
 * registers the connection's MR.
 */
static void reconnect_pair(struct app *a, struct reconnect *r)
{
	memset(a->q, 0, 2 * sizeof(*a->q));
	a->q[0].idx = 0;
	a->q[1].idx = 1;
	a->q[0].peer = a->q[1].peer = -1;
	cm_connect_pair(a, 0);
	r->mrs[r->connections++] = register_target(a);
	r->live++;
	r->connected = true;
}

/*
 * Ends the connection as both sides do: disconnect, destroy both QPs and,
 * with --mrs dereg, deregister the connection's MR (keep: it stays).
 */
static void end_connection(struct app *a, struct reconnect *r)
{
	cm_disconnect_pair(a, &a->q[0], &a->q[1]);
	destroy_qp(a, &a->q[0]);
	destroy_qp(a, &a->q[1]);
	if (a->o.mrs_dereg) {
		deregister_target(a, &r->mrs[r->connections - 1]);
		r->live--;
	}
	r->connected = false;
}

/*
 * --cycle-pause-ms, --connected-ms: a pause of ms, servicing async events;
 * a signal ends it.
 */
static void cycle_pause(struct app *a, int ms)
{
	int64_t end = now_us() + (int64_t)ms * 1000;
	int64_t left;

	while (!g_signal && (left = end - now_us()) > 0)
		wait_async(a, left);
}

/*
 * --reconnect: N RDMA WRITEs ("cycles") of a client to a target over one
 * rdma_cm pair (client q[0], target q[1]) that reconnects only after a
 * failed write, as a client and a target do. Before cycle 0 the target
 * registered a buffer whose R_Key and address the client learned, and
 * deregistered it (a target restarted since): the client's first R_Key is
 * stale. Whenever the pair is not connected (at the start, after a failed
 * write) it connects, and the target registers a new buffer for remote
 * writes, one per connection. Each cycle the client posts one signaled
 * write with the R_Key it has: --rkey keep never changes it (every write
 * fails and every cycle reconnects), --rkey refresh takes the new
 * connection's after a failure (one failure, then the writes succeed on
 * one connection). A failed write (REM_ACCESS_ERR on rxe; the client's QP
 * is in Error, the target sees an access error as the provider reports
 * it) ends the connection: disconnect, destroy both QPs and, with --mrs
 * dereg, deregister the connection's MR (keep: they pile up, one per
 * connection). A successful write keeps the connection. After the last
 * cycle a connected pair is disconnected and destroyed as on exit; MRs
 * kept are deregistered after the hold.
 */
static void run_reconnect(struct app *a)
{
	struct reconnect r = { .mrs = calloc((size_t)a->o.reconnect, sizeof(*r.mrs)) };
	struct target_mr stale;
	uint32_t rkey;
	uint64_t raddr;
	long cycle, errors = 0, i;
	struct line l;

	if (!r.mrs)
		fail(a, "calloc", NO_QPN, ENOMEM, NULL);
	a->nq = 2;
	a->q = calloc(2, sizeof(*a->q));
	if (!a->q)
		fail(a, "calloc", NO_QPN, ENOMEM, NULL);
	cm_listen(a);
	stale = register_target(a);
	rkey = stale.mr->rkey;
	raddr = (uintptr_t)stale.buf;
	deregister_target(a, &stale);
	l_begin(&l, "reconnect_start");
	l_int(&l, "pid", getpid());
	l_int(&l, "rkey", rkey);
	l_emit(&l);
	for (cycle = 0; cycle < a->o.reconnect && !g_signal; cycle++) {
		struct qpent *c = &a->q[0], *s = &a->q[1];
		struct target_mr *t;
		enum ibv_wc_status st;

		if (!r.connected) {
			reconnect_pair(a, &r);
			if (a->o.rkey_refresh && errors > 0) {
				rkey = r.mrs[r.connections - 1].mr->rkey;
				raddr = (uintptr_t)r.mrs[r.connections - 1].buf;
			}
			if (a->o.connected_ms > 0)
				cycle_pause(a, a->o.connected_ms);
		}
		t = &r.mrs[r.connections - 1];
		st = rdma_write_once(a, c, raddr, rkey);
		if (st != IBV_WC_SUCCESS)
			errors++;
		pump_async(a);
		l_begin(&l, "cycle");
		l_int(&l, "cycle", cycle);
		l_int(&l, "connection", r.connections - 1);
		l_int(&l, "client_qpn", c->qpn);
		l_int(&l, "target_qpn", s->qpn);
		l_int(&l, "rkey", rkey);
		l_int(&l, "target_rkey", t->mr->rkey);
		l_str(&l, "status", wc_status_name(st));
		l_int(&l, "target_mrs", r.live);
		l_emit(&l);
		if (st != IBV_WC_SUCCESS)
			end_connection(a, &r);
		if (a->o.cycle_pause_ms > 0 && cycle + 1 < a->o.reconnect)
			cycle_pause(a, a->o.cycle_pause_ms);
	}
	if (r.connected)
		end_connection(a, &r);
	l_begin(&l, "reconnect");
	l_int(&l, "cycles", cycle);
	l_int(&l, "write_errors", errors);
	l_int(&l, "connections", r.connections);
	l_int(&l, "target_mrs", r.live);
	l_emit(&l);
	hold_without_qps(a);
	for (i = 0; i < r.connections; i++)
		deregister_target(a, &r.mrs[i]);
	free(r.mrs);
	free(a->q);
	a->q = NULL;
	a->nq = 0;
}

/* One QP of a churn cycle, through ibv_create_qp. */
SITE_FN static struct ibv_qp *create_qp_churn(struct app *a)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp *qp;

	fill_qp_init_attr(a, &ia, NULL);
	qp = ibv_create_qp(a->pd, &ia);
	if (!qp)
		fail(a, "ibv_create_qp", NO_QPN, err_of(-1), "churn");
	return qp;
}

static void run_churn(struct app *a)
{
	enum churn_states st = a->o.churn_states;
	const char *st_name;
	int64_t t0, deadline = 0, t_end;
	long long cycles = 0;
	bool interrupted = false;
	double secs;
	sigset_t old;
	struct line l;

	if (st == CHURN_AUTO)
		st = (a->ctx->device->transport_type == IBV_TRANSPORT_IB &&
		      (a->have_gid || a->o.type == IBV_QPT_UD)) ?
		     CHURN_RTS : CHURN_INIT_ERR;
	st_name = st == CHURN_RTS ? "rts" : "init-err";

	l_begin(&l, "churn_start");
	l_int(&l, "pid", getpid());
	l_str(&l, "states", st_name);
	l_bool(&l, "srq", a->srq != NULL);
	l_emit(&l);

	/* Let SIGINT/SIGTERM stop the loop asynchronously (SA_RESTART). */
	sigprocmask(SIG_SETMASK, &a->waitmask, &old);
	a->count_only = true;

	t0 = now_us();
	if (a->o.churn_seconds > 0)
		deadline = t0 + (int64_t)(a->o.churn_seconds * 1e6);
	for (;;) {
		struct ibv_qp *qp;
		int ret;

		if (g_signal) {
			interrupted = true;
			break;
		}
		if (a->o.churn > 0 && cycles >= a->o.churn)
			break;
		if (deadline && now_us() >= deadline)
			break;
		if (a->o.churn_rate > 0) {
			/* Cycle k starts at t0 + k/R: a late cycle is not
			 * made up by a burst beyond the schedule. */
			int64_t due = t0 + (int64_t)((double)cycles * 1e6 / a->o.churn_rate);
			int64_t now = now_us();

			if (due > now) {
				struct timespec ts = { (due - now) / 1000000, (due - now) % 1000000 * 1000 };

				while (nanosleep(&ts, &ts) && errno == EINTR && !g_signal)
					;
				if (g_signal)
					continue;
			}
		}

		qp = create_qp_churn(a);
		ret = modify_init(a, qp);
		if (ret)
			fail(a, "ibv_modify_qp INIT", qp->qp_num, err_of(ret), "churn");
		if (st == CHURN_RTS) {
			ret = modify_rtr(a, qp, qp->qp_num);	/* to itself */
			if (ret)
				fail(a, "ibv_modify_qp RTR", qp->qp_num, err_of(ret), "churn");
			ret = modify_rts(a, qp);
			if (ret)
				fail(a, "ibv_modify_qp RTS", qp->qp_num, err_of(ret), "churn");
		}
		ret = modify_err(qp);
		if (ret)
			fail(a, "ibv_modify_qp ERR", qp->qp_num, err_of(ret), "churn");
		pump_async(a);
		ret = ibv_destroy_qp(qp);
		if (ret)
			fail(a, "ibv_destroy_qp", NO_QPN, err_of(ret), "churn");
		cycles++;
	}
	t_end = now_us();
	sigprocmask(SIG_SETMASK, &old, NULL);
	pump_async(a);
	a->count_only = false;
	g_signal = 0;

	secs = (double)(t_end - t0) / 1e6;
	l_begin(&l, "churn");
	l_int(&l, "cycles", cycles);
	l_num(&l, "seconds", secs, 6);
	l_num(&l, "cycles_per_sec", secs > 0 ? (double)cycles / secs : 0, 1);
	l_str(&l, "states", st_name);
	l_int(&l, "async_events", (long long)a->async_count);
	l_bool(&l, "interrupted", interrupted);
	l_emit(&l);
}

/* ------------------------------------------------------------------ */
/* Orphan                                                              */

static void orphan(struct app *a)
{
	struct line l;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		fail(a, "fork", NO_QPN, errno, NULL);
	if (pid > 0) {
		l_begin(&l, "orphaned");
		l_int(&l, "child_pid", pid);
		l_emit(&l);
		/* No atexit handlers, no library destructors: leave every
		 * verbs object to the child that shares the fds. */
		_exit(0);
	}
}

/* ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	struct app app, *a = &app;
	int64_t t_setup0, create_us = 0;
	struct line l;
	long i;

	memset(a, 0, sizeof(*a));
	parse_opts(argc, argv, &a->o);
	setup_signals(a);

	open_device(a);
	if (a->o.conn == CONN_VERBS)
		select_gid(a);

	if (a->o.reconnect > 0) {
		create_shared(a, 2);
		run_reconnect(a);
		release_shared(a);
		l_begin(&l, "done");
		l_emit(&l);
		return 0;
	}
	if (a->o.reg_mrs > 0) {
		run_reg_mrs(a);
		release_shared(a);
		l_begin(&l, "done");
		l_emit(&l);
		return 0;
	}
	if (a->o.oversized > 0) {
		create_shared(a, 1);
		run_oversized(a);
		hold_without_qps(a);
		release_shared(a);
		l_begin(&l, "done");
		l_emit(&l);
		return 0;
	}
	if (a->o.churn > 0 || a->o.churn_seconds > 0) {
		create_shared(a, 1);
		run_churn(a);
		release_shared(a);
		l_begin(&l, "done");
		l_emit(&l);
		return 0;
	}

	a->nq = a->o.pairs ? 2 * a->o.qps : a->o.qps;
	if (a->dattr.max_qp > 0 && a->nq > a->dattr.max_qp) {
		char msg[128];

		snprintf(msg, sizeof(msg),
			 "%ld QPs requested, device max_qp is %d; trying anyway",
			 a->nq, a->dattr.max_qp);
		warn_line(msg);
	}
	a->q = calloc((size_t)a->nq, sizeof(*a->q));
	if (!a->q)
		fail(a, "calloc", NO_QPN, ENOMEM, NULL);
	for (i = 0; i < a->nq; i++) {
		a->q[i].idx = i;
		a->q[i].peer = -1;
	}

	t_setup0 = now_us();
	create_shared(a, a->nq);
	if (a->o.conn == CONN_CM)
		setup_cm(a, &create_us);
	else
		setup_verbs(a, &create_us);
	pump_async(a);

	if (!a->o.quiet)
		for (i = 0; i < a->nq; i++)
			print_qp(a, &a->q[i]);
	if (a->o.batch) {
		double setup_s = (double)(now_us() - t_setup0) / 1e6;
		double create_s = (double)create_us / 1e6;

		l_begin(&l, "batch");
		l_int(&l, "qps", a->nq);
		l_num(&l, "create_seconds", create_s, 6);
		l_num(&l, "setup_seconds", setup_s, 6);
		l_num(&l, "qps_per_sec", create_s > 0 ? (double)a->nq / create_s : 0, 1);
		l_emit(&l);
	}

	l_begin(&l, "ready");
	l_int(&l, "pid", getpid());
	l_int(&l, "qps", a->nq);
	l_str(&l, "dev", a->o.dev);
	l_emit(&l);

	if (a->o.orphan)
		orphan(a);

	hold(a);
	teardown(a);

	l_begin(&l, "done");
	l_emit(&l);
	free(a->q);
	return 0;
}
