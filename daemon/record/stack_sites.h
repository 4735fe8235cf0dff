/* stack_sites: what the default set learns from whole stacks to read the
 * ones that tell less (used by long_poll.c).
 *
 * Tokio's blocking pool runs every task of its threads from one function
 * (Inner::run): a worker loop's launch and each spawn_blocking job are
 * polled from it, and a pool thread waiting for its next job (up to the
 * keep-alive, 10 s by default) sleeps in it with no poll on its stack. A
 * stripped build names none of it: the function is learnt from what calls
 * blocking-pool polls.
 *
 * A stack cut before its poll frame (the deep copies' byte rate used up,
 * the ring short of room, the frame limit) reads as no poll: a worker's
 * sleep there became a park. npm pact stub server (musl static-pie,
 * stripped, 46 KiB request stacks): 501 of 501 of an 8 s default-set
 * recording's parks were sleeps inside a poll, the workers 13-16 % parked
 * when they were 99 % busy, while whole stacks through that sleep's site
 * showed the poll (13 of 13). So whole stacks taken in the kernel teach
 * what their site, the innermost STACK_SITE_FRAMES user frames, was in: a
 * task poll (which, and what its frame called) or none; a cut stack
 * through a site that whole ones always showed in one poll is in that
 * poll. A site seen both ways, or in two polls, teaches nothing.
 *
 * Frames are leaf first, n_kern kernel ones first, a caller's frame its
 * return address - 1. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct translate;
struct tr_thread;

#define STACK_SITE_FRAMES 4

/* frames[i] is a blocking-pool poll frame: learn its caller's function. */
void stack_sites_pool_learn(struct translate *tr, const uint64_t *frames, uint32_t i, uint32_t n);
/* Whether one of the outermost user frames is in the pool's loop. */
bool stack_sites_in_pool_run(const struct translate *tr, struct tr_thread *t, const uint64_t *frames, uint32_t n,
                             uint32_t n_kern);
/* A whole stack: in task poll `poll` (cookie + 1, 0: none), whose frame
 * called `callee`. */
void stack_sites_learn(struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern, uint32_t poll,
                       uint64_t callee);
/* A cut stack: true, with *poll and *callee, if its site is in one poll. */
bool stack_sites_poll(const struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern,
                      uint32_t *poll, uint64_t *callee);
/* Forget what was learnt (a new plan). */
void stack_sites_free(struct translate *tr);
