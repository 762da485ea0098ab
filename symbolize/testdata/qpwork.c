// A stand-in for an application creating QPs, for symbolize's tests.
// leak_qps calls create_qp directly, as an application calls ibv_create_qp;
// leak_qps_ex calls it through a function pointer, as ibv_create_qp_ex
// calls the provider's. create_qp returns its own return address, which a
// uprobe on it would read. main prints "PID RET RET_EX LEAK_QPS" (the two
// return addresses and leak_qps's address) and waits for its standard
// input to close.
#include <stdio.h>
#include <unistd.h>

volatile int qps;

__attribute__((noinline)) void *create_qp(void)
{
	return __builtin_return_address(0);
}

void *(*volatile create_qp_ex)(void) = create_qp;

__attribute__((noinline)) void setup(int n)
{
	qps += n;
}

__attribute__((noinline)) void *leak_qps(int n)
{
	void *ret;

	setup(n);
	ret = create_qp();
	__asm__ volatile("" : : "r"(ret) : "memory"); /* no tail call */
	return ret;
}

__attribute__((noinline)) void *leak_qps_ex(int n)
{
	void *ret;

	setup(n);
	ret = create_qp_ex();
	__asm__ volatile("" : : "r"(ret) : "memory");
	return ret;
}

int main(int argc, char **argv)
{
	char c;
	void *ret = leak_qps(argc), *ret_ex = leak_qps_ex(argc);

	(void)argv;
	printf("%d %p %p %p\n", (int)getpid(), ret, ret_ex, (void *)leak_qps);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
