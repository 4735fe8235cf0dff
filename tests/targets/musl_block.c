/* musl_block: a musl static-pie C program for the unwinder's tests
 * (tests/stacks): main -> level1 -> level2 -> level3 -> block_once ->
 * nanosleep, 10 ms at a time. Debian's musl has no FDE for its own
 * functions (nanosleep, clock_nanosleep, the syscall stub), so an off-CPU
 * stack taken in the sleep starts in code .eh_frame cannot unwind, as in
 * every musl static-pie release binary.
 * usage: musl_block [ROUNDS] (default 100; sleeps 1 s first, for a tracer)
 *
 * musl_block ROUNDS under-map: the same sleeps in a thread (thread_main ->
 * level1 ...) whose stack mapping has a readable mapping right above it,
 * as a musl thread's stack often has a heap mapping there (npm pagefind
 * 1.6.0: 5 of 14 threads). musl's start() has no FDE, so the walk ends
 * there; the memory above the thread's TLS and descriptor is another
 * mapping's, not stack, and a stack that reached start() is whole. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* The empty asm after each call keeps it a call, not a tail jump: each
 * level must have a frame of its own. */
__attribute__((noinline)) void block_once(int ms)
{
        struct timespec ts = { 0, ms * 1000000L };

        nanosleep(&ts, NULL);
        __asm__ volatile("");
}

__attribute__((noinline)) void level3(int ms)
{
        block_once(ms);
        __asm__ volatile("");
}

__attribute__((noinline)) void level2(int ms)
{
        level3(ms);
        __asm__ volatile("");
}

__attribute__((noinline)) void level1(int ms)
{
        level2(ms);
        __asm__ volatile("");
}

#define STACK (256 << 10)
#define ABOVE (64 << 10)

/* The thread's stack: STACK bytes with ABOVE bytes of readable, touched
 * memory right above them, a mapping of its own (read-only, so the kernel
 * keeps it apart). musl puts the thread's TLS and descriptor at the top
 * of a stack it is given, as at the top of one it maps. */
static void *stack_under_a_mapping(void)
{
        char *p = mmap(NULL, STACK + ABOVE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        if (p == MAP_FAILED)
                return NULL;
        memset(p + STACK, 0x5a, ABOVE);        /* in memory, so BPF can read it */
        if (mprotect(p + STACK, ABOVE, PROT_READ))
                return NULL;
        return p;
}

__attribute__((noinline)) void *thread_main(void *arg)
{
        int rounds = (int)(intptr_t)arg;

        sleep(1);
        for (int i = 0; i < rounds; i++)
                level1(10);
        __asm__ volatile("");
        return NULL;
}

int main(int argc, char **argv)
{
        int rounds = argc > 1 ? atoi(argv[1]) : 100;

        if (argc > 2 && !strcmp(argv[2], "under-map")) {
                void *stack = stack_under_a_mapping();
                pthread_attr_t at;
                pthread_t th;

                if (!stack || pthread_attr_init(&at) || pthread_attr_setstack(&at, stack, STACK) ||
                    pthread_create(&th, &at, thread_main, (void *)(intptr_t)rounds))
                        return 1;
                pthread_join(th, NULL);
                return 0;
        }
        sleep(1);
        for (int i = 0; i < rounds; i++)
                level1(10);
        return 0;
}
