/* stack_sites.c: see stack_sites.h. */
#include <stdlib.h>

#include "daemon/record/stack_sites.h"
#include "daemon/record/translate.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* How far from a thread's start the pool's loop is: the thread's start
 * and a few closures of std's and Tokio's. */
#define POOL_RUN_OUTER 16
#define STACK_SITES 1024

struct stack_site {
        uint64_t key;
        uint64_t callee;        /* what the poll frame called; 0: not one thing */
        uint32_t poll;          /* cookie + 1 of the task poll, 0: none */
        bool mixed;             /* seen in a poll and not, or in two */
};

/* frames[lo, hi) as one key (FNV-1a over the words), never 0. */
static uint64_t frames_key(const uint64_t *frames, uint32_t lo, uint32_t hi)
{
        uint64_t key = 0xcbf29ce484222325ull;

        for (uint32_t i = lo; i < hi; i++)
                key = (key ^ frames[i]) * 0x100000001b3ull;
        return key | 1;
}

void stack_sites_pool_learn(struct translate *tr, const uint64_t *frames, uint32_t i, uint32_t n)
{
        uint64_t fn;

        if (i + 1 >= n || !tr->lp_fn_of)
                return;
        for (uint32_t k = 0; k < tr->n_pool_callers; k++)
                if (tr->pool_callers[k] == frames[i + 1])
                        return;
        if (tr->n_pool_callers == ARRAY_LEN(tr->pool_callers))
                return;
        tr->pool_callers[tr->n_pool_callers++] = frames[i + 1];
        if (tr->lp_fn_of(tr, frames[i + 1], &fn) < 0 || tr->n_pool_run_fns == ARRAY_LEN(tr->pool_run_fns))
                return;
        for (uint32_t k = 0; k < tr->n_pool_run_fns; k++)
                if (tr->pool_run_fns[k] == fn)
                        return;
        tr->pool_run_fns[tr->n_pool_run_fns++] = fn;
}

/* A thread that is not the pool's (main in block_on, a rayon or file-watch
 * thread) shows the same outermost frames stack after stack: looked up
 * once while the loop's functions stay the same. */
bool stack_sites_in_pool_run(const struct translate *tr, struct tr_thread *t, const uint64_t *frames, uint32_t n,
                             uint32_t n_kern)
{
        uint32_t lo = n - n_kern > POOL_RUN_OUTER ? n - POOL_RUN_OUTER : n_kern;
        uint64_t fn, outer = frames_key(frames, lo, n);

        if (!tr->n_pool_run_fns || (t->pool_not_outer == outer && t->pool_not_fns == tr->n_pool_run_fns))
                return false;
        for (uint32_t i = lo; i < n; i++) {
                if (tr->lp_fn_of(tr, frames[i], &fn) < 0)
                        continue;
                for (uint32_t k = 0; k < tr->n_pool_run_fns; k++)
                        if (tr->pool_run_fns[k] == fn)
                                return true;
        }
        t->pool_not_outer = outer;
        t->pool_not_fns = tr->n_pool_run_fns;
        return false;
}

/* The site's key: only stacks taken in the kernel (a sleep's, a system
 * call's), with that many user frames. */
static uint64_t site_key(const uint64_t *frames, uint32_t n, uint32_t n_kern)
{
        return n_kern && n - n_kern >= STACK_SITE_FRAMES ? frames_key(frames, n_kern, n_kern + STACK_SITE_FRAMES) : 0;
}

void stack_sites_learn(struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern, uint32_t poll,
                       uint64_t callee)
{
        uint64_t key = site_key(frames, n, n_kern);
        struct stack_site *s;

        if (!key || (!tr->stack_sites && !(tr->stack_sites = calloc(STACK_SITES, sizeof(*tr->stack_sites)))))
                return;
        s = &tr->stack_sites[key % STACK_SITES];
        if (s->key != key) {
                *s = (struct stack_site){ .key = key, .callee = callee, .poll = poll };
                return;
        }
        s->mixed |= s->poll != poll;
        if (s->callee != callee)
                s->callee = 0;
}

bool stack_sites_poll(const struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern,
                      uint32_t *poll, uint64_t *callee)
{
        uint64_t key = site_key(frames, n, n_kern);
        const struct stack_site *s = key && tr->stack_sites ? &tr->stack_sites[key % STACK_SITES] : NULL;

        if (!s || s->key != key || !s->poll || s->mixed)
                return false;
        *poll = s->poll;
        *callee = s->callee;
        return true;
}

void stack_sites_free(struct translate *tr)
{
        free(tr->stack_sites);
        tr->stack_sites = NULL;
        tr->n_pool_run_fns = 0;
        tr->n_pool_callers = 0;
}
