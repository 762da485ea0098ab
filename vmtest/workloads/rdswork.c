/*
 * rdswork: two RDS sockets over RDS's IB transport (rds_rdma) on two local
 * addresses of one RDMA netdev, so that the kernel's RDS creates its
 * connection's RC QPs (owned by rdma_cm for rds_rdma) and, for RDMA,
 * fast-registers memory on them. The lab tests run it under rdmatool.
 *
 *   rdswork --a ADDR --b ADDR [--port N] [--mode quiet|bad-rkey]
 *           [--cycles N] [--timeout-ms N] [--hold stdin|S]
 *
 * Socket A sends to socket B. Each of --cycles cycles is an RDMA WRITE
 * from A into B's buffer (RDS_CMSG_RDMA_ARGS, RDS_RDMA_NOTIFY_ME: A learns
 * the write's status), then a message from A that B must receive (the
 * connection carries messages again):
 *   quiet     B first maps its buffer (RDS_CMSG_RDMA_MAP on a message to
 *             A: RDS fast-registers it on the connection's QP and A
 *             receives the cookie, R_Key and offset, in RDS_CMSG_RDMA_DEST)
 *             and every write uses that cookie: no error, one connection.
 *   bad-rkey  nothing is mapped and every write uses an R_Key no MR has:
 *             the peer refuses it, the QPs go to Error, RDS drops the
 *             connection and connects again: one reconnect a cycle. A
 *             mapping in use on the failed connection would hold its
 *             shutdown up (rds_ib_conn_path_shutdown waits for
 *             i_fastreg_inuse_count to reach 0; measured on 6.12: the
 *             passive end's QP stays in Error, its rdma_cm ID in
 *             DISCONNECT, until the socket that mapped is closed).
 * After the cycles, RDS_GET_MR (the setsockopt that maps without a
 * connection) is tried once and its result printed.
 *
 * Output: one JSON object a line on stdout ("event": "bound", "get_mr",
 * "mapped", "cycle", "ready", "done", "error"). Exit 0 when every step
 * ran (a write's failure is a result, not an error), 1 on an error, 2 on
 * bad arguments.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/rds.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_RDS
#define AF_RDS 21
#endif

#define BUF_LEN 65536
/* An R_Key no MR has: rxe's MR indexes (the key's upper 24 bits) stay far
 * below 0x7ffff0. */
#define BAD_RKEY 0x7ffff0a5u

enum mode { MODE_QUIET, MODE_BAD_RKEY };

static const char *mode_names[] = { "quiet", "bad-rkey" };

struct opts {
	struct in_addr a, b;
	int port;
	enum mode mode;
	long cycles;
	int timeout_ms;
	int hold_stdin;
	double hold_s;
};

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fail(const char *op, int err)
{
	printf("{\"event\":\"error\",\"op\":\"%s\",\"errno\":%d,\"error\":\"%s\"}\n", op, err, strerror(err));
	fflush(stdout);
	exit(1);
}

static void usage(int code)
{
	fprintf(code ? stderr : stdout,
		"usage: rdswork --a ADDR --b ADDR [--port N] [--mode quiet|bad-rkey]\n"
		"               [--cycles N] [--timeout-ms N] [--hold stdin|S]\n");
	exit(code);
}

static void bad_arg(const char *what, const char *val)
{
	fprintf(stderr, "rdswork: bad %s %s\n", what, val);
	exit(2);
}

static long parse_long(const char *what, const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *s == '\0' || *end != '\0' || v < lo || v > hi)
		bad_arg(what, s);
	return v;
}

static int rds_socket(struct in_addr addr, int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = addr };
	int trans = RDS_TRANS_IB;
	int fd;

	fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
	if (fd < 0)
		fail("socket", errno);
	/* Without it RDS would pick its loopback transport for a local peer. */
	if (setsockopt(fd, SOL_RDS, SO_RDS_TRANSPORT, &trans, sizeof(trans)) < 0)
		fail("transport", errno);
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		fail("bind", errno);
	return fd;
}

/* wait_in waits until fd is readable or ms pass: 1 readable, 0 not. */
static int wait_in(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n;

	do {
		n = poll(&p, 1, ms);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		fail("poll", errno);
	return n > 0;
}

struct got {
	int data;		/* a message with data came */
	char text[64];
	int has_dest;		/* RDS_CMSG_RDMA_DEST: the sender's cookie */
	uint64_t dest;
	int has_status;		/* RDS_CMSG_RDMA_STATUS: an RDMA op's end */
	struct rds_rdma_notify status;
};

/* receive reads one message or notification of fd within ms: 0 when none
 * came. */
static int receive(int fd, int ms, struct got *g)
{
	char cbuf[CMSG_SPACE(sizeof(uint64_t)) + CMSG_SPACE(sizeof(struct rds_rdma_notify)) + 256];
	struct sockaddr_in from;
	struct iovec iov;
	struct msghdr msg;
	struct cmsghdr *c;
	ssize_t n;

	memset(g, 0, sizeof(*g));
	if (!wait_in(fd, ms))
		return 0;
	iov.iov_base = g->text;
	iov.iov_len = sizeof(g->text) - 1;
	memset(&msg, 0, sizeof(msg));
	msg.msg_name = &from;
	msg.msg_namelen = sizeof(from);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cbuf;
	msg.msg_controllen = sizeof(cbuf);
	n = recvmsg(fd, &msg, MSG_DONTWAIT);
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		fail("recvmsg", errno);
	}
	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_RDS)
			continue;
		if (c->cmsg_type == RDS_CMSG_RDMA_DEST && c->cmsg_len >= CMSG_LEN(sizeof(uint64_t))) {
			memcpy(&g->dest, CMSG_DATA(c), sizeof(g->dest));
			g->has_dest = 1;
		} else if (c->cmsg_type == RDS_CMSG_RDMA_STATUS &&
			   c->cmsg_len >= CMSG_LEN(sizeof(struct rds_rdma_notify))) {
			memcpy(&g->status, CMSG_DATA(c), sizeof(g->status));
			g->has_status = 1;
		}
	}
	g->data = n > 0 || !g->has_status;
	return 1;
}

/* send_msg sends text from fd to `to`, with one control message of
 * level SOL_RDS (none when ctype is 0), retrying while RDS answers EAGAIN
 * (a mapping needs the connection up) or ENOBUFS (the send queue is full)
 * until the deadline: 0 or the errno of the last try. */
static int send_msg(int fd, struct sockaddr_in *to, const char *text, int ctype, const void *cdata,
		    size_t clen, long long deadline)
{
	char cbuf[CMSG_SPACE(sizeof(struct rds_rdma_args))];
	struct iovec iov = { .iov_base = (void *)text, .iov_len = strlen(text) };
	struct msghdr msg;
	struct cmsghdr *c;

	for (;;) {
		memset(&msg, 0, sizeof(msg));
		memset(cbuf, 0, sizeof(cbuf));
		msg.msg_name = to;
		msg.msg_namelen = sizeof(*to);
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		if (ctype) {
			msg.msg_control = cbuf;
			msg.msg_controllen = CMSG_SPACE(clen);
			c = CMSG_FIRSTHDR(&msg);
			c->cmsg_level = SOL_RDS;
			c->cmsg_type = ctype;
			c->cmsg_len = CMSG_LEN(clen);
			memcpy(CMSG_DATA(c), cdata, clen);
		}
		if (sendmsg(fd, &msg, 0) >= 0)
			return 0;
		if ((errno != EAGAIN && errno != ENOBUFS && errno != EINTR) || now_ms() > deadline)
			return errno;
		usleep(10000);
	}
}

struct world {
	struct opts o;
	int fa, fb;
	struct sockaddr_in sa, sb;
	char *abuf, *bbuf;
};

/* deliver sends text from A to B and waits until B has it: the
 * connection carries messages (again). Other messages B gets on the way
 * are dropped. Returns the milliseconds it took. */
static long long deliver(struct world *w, const char *text)
{
	long long t0 = now_ms(), end = t0 + w->o.timeout_ms;
	struct got g;
	int err;

	err = send_msg(w->fa, &w->sb, text, 0, NULL, 0, end);
	if (err)
		fail("send", err);
	while (now_ms() < end) {
		if (!receive(w->fb, 100, &g) || !g.data)
			continue;
		if (strcmp(g.text, text) == 0)
			return now_ms() - t0;
	}
	fail("deliver", ETIMEDOUT);
	return 0;
}

/* map has B map its buffer on its connection to A and send A the cookie;
 * A's copy is returned (0 when the map was refused: the errno goes out). */
static uint64_t map(struct world *w, int n)
{
	uint64_t cookie = 0;
	struct rds_get_mr_args args = {
		.vec = { .addr = (uint64_t)(uintptr_t)w->bbuf, .bytes = BUF_LEN },
		.cookie_addr = (uint64_t)(uintptr_t)&cookie,
		.flags = RDS_RDMA_READWRITE,
	};
	long long end = now_ms() + w->o.timeout_ms;
	char text[32];
	struct got g;
	int err;

	snprintf(text, sizeof(text), "map %d", n);
	err = send_msg(w->fb, &w->sa, text, RDS_CMSG_RDMA_MAP, &args, sizeof(args), end);
	if (err) {
		printf("{\"event\":\"mapped\",\"n\":%d,\"errno\":%d,\"error\":\"%s\"}\n", n, err, strerror(err));
		fflush(stdout);
		return 0;
	}
	while (now_ms() < end) {
		if (!receive(w->fa, 100, &g) || !g.data || strcmp(g.text, text) != 0)
			continue;
		printf("{\"event\":\"mapped\",\"n\":%d,\"rkey\":%u,\"offset\":%u,\"dest\":%s}\n", n,
		       (unsigned)cookie, (unsigned)(cookie >> 32), g.has_dest ? "true" : "false");
		fflush(stdout);
		return g.has_dest ? g.dest : cookie;
	}
	fail("map", ETIMEDOUT);
	return 0;
}

/* write_rdma writes A's buffer into B's through cookie and waits for its
 * status: RDS_RDMA_SUCCESS, _REMOTE_ERROR, ... (-1: none came). */
static int write_rdma(struct world *w, uint64_t cookie, int n)
{
	struct rds_iovec local = { .addr = (uint64_t)(uintptr_t)w->abuf, .bytes = 4096 };
	struct rds_rdma_args args = {
		.cookie = cookie,
		.remote_vec = { .addr = 0, .bytes = 4096 },
		.local_vec_addr = (uint64_t)(uintptr_t)&local,
		.nr_local = 1,
		.flags = RDS_RDMA_READWRITE | RDS_RDMA_NOTIFY_ME,
		.user_token = (uint64_t)n,
	};
	long long end = now_ms() + w->o.timeout_ms;
	char text[32];
	struct got g;
	int err;

	snprintf(text, sizeof(text), "write %d", n);
	err = send_msg(w->fa, &w->sb, text, RDS_CMSG_RDMA_ARGS, &args, sizeof(args), end);
	if (err)
		fail("rdma write", err);
	while (now_ms() < end) {
		if (receive(w->fa, 100, &g) && g.has_status && g.status.user_token == (uint64_t)n)
			return g.status.status;
	}
	return -1;
}

static const char *status_name(int s)
{
	switch (s) {
	case RDS_RDMA_SUCCESS:
		return "success";
	case RDS_RDMA_REMOTE_ERROR:
		return "remote_error";
	case RDS_RDMA_CANCELED:
		return "canceled";
	case RDS_RDMA_DROPPED:
		return "dropped";
	case RDS_RDMA_OTHER_ERROR:
		return "other_error";
	}
	return "none";
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option long_opts[] = {
		{ "a", required_argument, NULL, 'a' },
		{ "b", required_argument, NULL, 'b' },
		{ "port", required_argument, NULL, 'p' },
		{ "mode", required_argument, NULL, 'm' },
		{ "cycles", required_argument, NULL, 'c' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "hold", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int have_a = 0, have_b = 0, c;
	unsigned i;

	memset(o, 0, sizeof(*o));
	o->port = 18634;
	o->cycles = 1;
	o->timeout_ms = 30000;
	while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			if (inet_pton(AF_INET, optarg, &o->a) != 1)
				bad_arg("--a", optarg);
			have_a = 1;
			break;
		case 'b':
			if (inet_pton(AF_INET, optarg, &o->b) != 1)
				bad_arg("--b", optarg);
			have_b = 1;
			break;
		case 'p':
			o->port = (int)parse_long("--port", optarg, 1, 65535);
			break;
		case 'm':
			for (i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
				if (strcmp(optarg, mode_names[i]) == 0)
					break;
			if (i == sizeof(mode_names) / sizeof(mode_names[0]))
				bad_arg("--mode", optarg);
			o->mode = (enum mode)i;
			break;
		case 'c':
			o->cycles = parse_long("--cycles", optarg, 0, 1000000);
			break;
		case 't':
			o->timeout_ms = (int)parse_long("--timeout-ms", optarg, 1, 3600000);
			break;
		case 'H':
			if (strcmp(optarg, "stdin") == 0) {
				o->hold_stdin = 1;
			} else {
				char *end;

				o->hold_s = strtod(optarg, &end);
				if (*optarg == '\0' || *end != '\0' || o->hold_s < 0)
					bad_arg("--hold", optarg);
			}
			break;
		case 'h':
			usage(0);
			break;
		default:
			usage(2);
		}
	}
	if (optind != argc || !have_a || !have_b)
		usage(2);
	if (o->a.s_addr == o->b.s_addr)
		bad_arg("--b (the same as --a)", inet_ntoa(o->b));
}

int main(int argc, char **argv)
{
	struct world w;
	uint64_t cookie;
	long i;
	int err;

	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(&w, 0, sizeof(w));
	parse(argc, argv, &w.o);
	w.abuf = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	w.bbuf = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w.abuf == MAP_FAILED || w.bbuf == MAP_FAILED)
		fail("mmap", errno);
	memset(w.abuf, 0xab, BUF_LEN);
	memset(w.bbuf, 0, BUF_LEN);
	w.fa = rds_socket(w.o.a, w.o.port);
	w.fb = rds_socket(w.o.b, w.o.port);
	w.sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(w.o.port), .sin_addr = w.o.a };
	w.sb = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(w.o.port), .sin_addr = w.o.b };
	printf("{\"event\":\"bound\",\"pid\":%d,\"mode\":\"%s\"}\n", getpid(), mode_names[w.o.mode]);

	/* The connection: RDS connects on the first message. */
	printf("{\"event\":\"connected\",\"ms\":%lld}\n", deliver(&w, "hello"));

	/* bad-rkey maps nothing: a mapping in use on the failed connection's
	 * QP would hold up its shutdown (see the top of the file). */
	cookie = w.o.mode == MODE_QUIET ? map(&w, 0) : BAD_RKEY;
	for (i = 0; i < w.o.cycles && cookie; i++) {
		long long t0 = now_ms();
		char text[32];
		int st;

		st = write_rdma(&w, cookie, (int)i + 1);
		snprintf(text, sizeof(text), "after %ld", i + 1);
		printf("{\"event\":\"cycle\",\"n\":%ld,\"rkey\":%u,\"status\":\"%s\",\"ms\":%lld,\"deliver_ms\":%lld}\n",
		       i + 1, (unsigned)cookie, status_name(st), now_ms() - t0, deliver(&w, text));
	}

	/* RDS_GET_MR: a mapping without a connection; tried once the
	 * connection has carried messages both ways. */
	{
		uint64_t c = 0;
		struct rds_get_mr_args args = {
			.vec = { .addr = (uint64_t)(uintptr_t)w.bbuf, .bytes = BUF_LEN },
			.cookie_addr = (uint64_t)(uintptr_t)&c,
			.flags = RDS_RDMA_READWRITE,
		};

		err = setsockopt(w.fb, SOL_RDS, RDS_GET_MR, &args, sizeof(args)) < 0 ? errno : 0;
		printf("{\"event\":\"get_mr\",\"errno\":%d,\"error\":\"%s\"}\n", err, err ? strerror(err) : "");
		if (!err) {
			struct rds_free_mr_args fr = { .cookie = c };

			(void)setsockopt(w.fb, SOL_RDS, RDS_FREE_MR, &fr, sizeof(fr));
		}
	}

	printf("{\"event\":\"ready\",\"pid\":%d}\n", getpid());
	if (w.o.hold_stdin) {
		char c;

		while (read(0, &c, 1) > 0)
			;
	} else if (w.o.hold_s > 0) {
		usleep((useconds_t)(w.o.hold_s * 1e6));
	}
	close(w.fa);
	close(w.fb);
	printf("{\"event\":\"done\"}\n");
	return 0;
}
