/* musl_block: a musl static-pie C program for the unwinder's tests
 * (tests/stacks): main -> level1 -> level2 -> level3 -> block_once ->
 * nanosleep, 10 ms at a time. Debian's musl has no FDE for its own
 * functions (nanosleep, clock_nanosleep, the syscall stub), so an off-CPU
 * stack taken in the sleep starts in code .eh_frame cannot unwind, as in
 * every musl static-pie release binary.
 * usage: musl_block [ROUNDS] (default 100; sleeps 1 s first, for a tracer) */
#include <stdlib.h>
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

int main(int argc, char **argv)
{
        int rounds = argc > 1 ? atoi(argv[1]) : 100;

        sleep(1);
        for (int i = 0; i < rounds; i++)
                level1(10);
        return 0;
}
