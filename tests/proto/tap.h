/* Minimal TAP output for the proto tests. */
#pragma once

#include <stdio.h>

static int tap_n, tap_failed;

#define ok(cond, ...)                                                        \
        do {                                                                 \
                int ok_ = !!(cond);                                          \
                tap_n++;                                                     \
                if (!ok_)                                                    \
                        tap_failed++;                                        \
                printf("%s %d - ", ok_ ? "ok" : "not ok", tap_n);            \
                printf(__VA_ARGS__);                                         \
                printf("\n");                                                \
                if (!ok_)                                                    \
                        printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
        } while (0)

#define tap_bail(...)                                                        \
        do {                                                                 \
                printf("Bail out! ");                                        \
                printf(__VA_ARGS__);                                         \
                printf("\n");                                                \
                return 1;                                                    \
        } while (0)

static inline int tap_done(void)
{
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}
