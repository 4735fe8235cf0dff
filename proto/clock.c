/* clock.c: d9_now_ns, d9_now_ms and d9_thread_cpu_ns (d9proto.h). */
#include <time.h>

#include "d9proto.h"

uint64_t d9_now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t d9_now_ms(void)
{
        return d9_now_ns() / 1000000ull;
}

uint64_t d9_thread_cpu_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
