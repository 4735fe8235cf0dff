/* stack_fault: threads whose stack pages are given back and faulted in
 * again, so CPU samples land in a page fault on the stack itself (npm
 * codex-acp showed them ending unmarked at the faulting function). Each
 * thread drops 64 KiB below its frame (MADV_DONTNEED), then calls a
 * function whose frame spans those pages and stores into it from the
 * lowest address up: every page faults with sp in a page not in memory.
 * "fault-plain" has a 7 KiB frame, within the 8 KiB d9d copies; "fault-deep"
 * a 24 KiB one, which d9d reaches with deep copies.
 * usage: stack_fault (runs until killed) */
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#define PAGE 4096ul

/* Global, not static, so their names stay as written in the stacks. */
int fault_plain_frame(int seed);
int fault_deep_frame(int seed);
int drop_and_fault(int (*fn)(int), int seed);

/* Frame: a volatile array stored into page by page, lowest first. */
#define FAULT_FN(name, bytes)                                                   \
        __attribute__((noinline)) int name(int seed)                            \
        {                                                                       \
                volatile char buf[bytes];                                       \
                                                                                \
                for (unsigned i = 0; i < (bytes); i += 64)                      \
                        buf[i] = (char)(seed + i);                              \
                __asm__ volatile("");                                           \
                return buf[(unsigned)seed % (bytes)];                           \
        }

FAULT_FN(fault_plain_frame, 7 * 1024)
FAULT_FN(fault_deep_frame, 24 * 1024)

/* The pages wholly below this frame's sp, less 256 bytes for the madvise
 * call itself (a return address): the next frame's lowest page is one. */
__attribute__((noinline)) int drop_and_fault(int (*fn)(int), int seed)
{
        uintptr_t sp, hi;
        int r;

        __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
        hi = (sp - 256) & ~(PAGE - 1);

        madvise((void *)(hi - 64 * 1024), 64 * 1024, MADV_DONTNEED);
        r = fn(seed);
        __asm__ volatile("");
        return r;
}

static void *run(void *arg)
{
        int (*fn)(int) = arg;
        unsigned n = 0;

        for (;;)
                n += (unsigned)drop_and_fault(fn, (int)n);
        return NULL;
}

int main(void)
{
        pthread_t t[2];

        pthread_create(&t[0], NULL, run, (void *)fault_plain_frame);
        pthread_setname_np(t[0], "fault-plain");
        pthread_create(&t[1], NULL, run, (void *)fault_deep_frame);
        pthread_setname_np(t[1], "fault-deep");
        pthread_join(t[0], NULL);
        return 0;
}
