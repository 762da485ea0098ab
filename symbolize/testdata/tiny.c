// tiny.elf, a seed for FuzzELF and a fixed file for the ELF tests, is this
// built with (gcc 12.2, Debian bookworm, x86_64):
//
//	gcc -Os -nostdlib -static -fno-asynchronous-unwind-tables \
//		-Wl,--build-id -Wl,-z,norelro -Wl,-z,noseparate-code -o tiny.elf tiny.c
//	objcopy --remove-section=.comment tiny.elf
__attribute__((noinline)) int callee(int x) { return x * 3; }
int (*volatile fp)(int) = callee;
__attribute__((noinline)) int caller(int x) { return callee(x) + fp(x) + 1; }
void _start(void) { caller(1); for (;;) ; }
