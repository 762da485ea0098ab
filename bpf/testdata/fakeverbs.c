/*
 * fakeverbs calls libibverbs's ibv_create_qp on a fake protection domain
 * whose provider operations all point at stub(), so that the creation-site
 * uprobes can be tested on a host without RDMA (TestSitesUprobes): any
 * version of ibv_create_qp@@IBVERBS_1.1 reads its provider's create_qp from
 * memory near pd->context and calls or jumps to it.
 *
 * It prints "call PID TID" while inside a create (the return address the
 * test expects, in create_qp_plain, cannot be printed from here: the
 * uretprobe has replaced it on the stack) and "returned" after it, and
 * waits for a line on stdin after each. The second create is nested: stub
 * calls ibv_create_qp again.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *ops[128], *ctxmem[128];
static int nest;

static void wait_line(void)
{
	int c;

	while ((c = getchar()) != EOF && c != '\n')
		;
}

static struct ibv_qp *stub(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (nest > 0) {
		nest--;
		ibv_create_qp(pd, attr);
		return NULL;
	}
	printf("call %d %ld\n", getpid(), (long)syscall(SYS_gettid));
	fflush(stdout);
	wait_line();
	return NULL;
}

__attribute__((noinline)) static void create_qp_plain(struct ibv_pd *pd)
{
	struct ibv_qp_init_attr attr = { 0 };

	ibv_create_qp(pd, &attr);
	__asm__ volatile("" ::: "memory");
}

int main(void)
{
	struct ibv_pd pd = { 0 };
	int i;

	for (i = 0; i < 128; i++) {
		ops[i] = (void *)stub;
		ctxmem[i] = (char *)ops + 512;
	}
	pd.context = (struct ibv_context *)&ctxmem[64];

	create_qp_plain(&pd);
	printf("returned\n");
	fflush(stdout);
	wait_line();

	nest = 1;
	create_qp_plain(&pd);
	printf("returned\n");
	fflush(stdout);
	wait_line();
	return 0;
}
