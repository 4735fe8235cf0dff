/* Minimal TAP output for the C tests (ok, diag, bail, tap_done). */
#pragma once

#include <stdio.h>
#include <stdlib.h>

static int tap_n, tap_failed;

#define ok(cond, ...)                                                                   \
        do {                                                                            \
                int ok_ = !!(cond);                                                     \
                printf("%sok %d - ", ok_ ? "" : "not ", ++tap_n);                       \
                printf(__VA_ARGS__);                                                    \
                printf("\n");                                                           \
                if (!ok_) {                                                             \
                        tap_failed++;                                                   \
                        printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
                }                                                                       \
                fflush(stdout);                                                         \
        } while (0)

#define diag(...)                        \
        do {                             \
                printf("# ");            \
                printf(__VA_ARGS__);     \
                printf("\n");            \
                fflush(stdout);          \
        } while (0)

/* A precondition failed: stop with a failing plan so the suite cannot pass. */
#define bail(...)                                \
        do {                                     \
                printf("Bail out! ");            \
                printf(__VA_ARGS__);             \
                printf("\n");                    \
                exit(1);                         \
        } while (0)

static inline int tap_done(void)
{
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}
