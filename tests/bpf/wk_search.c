/* The default set's Worker search weighs its scans' finds (bpf/d9_wk_search.h,
 * the header the BPF program includes) on the host: which depth below the
 * thread pointer it takes for the loop's Arc<Worker>.
 *
 * The threads are a gdb snapshot of the 1.24 release block_in_place target
 * (tests/targets, `inplace`): each scan's finds, outermost first, one per
 * object, at their distance below the TLS. The loop's Worker lies at 2,648
 * bytes; copies of the real Workers' Arcs lie deeper (2,976, 6,032), often
 * on the other worker's thread, and Handle-shaped objects of another "runtime"
 * at 3,040 and 3,128. */
#include <linux/types.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#include "bpf/d9_wk_search.h"
#include "../tap.h"

enum { A = 0x98680, B = 0x986e0, R = 0x98430, H = 0x97af0, K = 0x983a0, R2 = 0x97060 };
#define LOOP 2648

struct scan {
        const char *what;
        __u32 n;
        struct d9_wk_find f[D9_WK_FINDS];
};

/* Index values are 1 + Tokio's, as BPF writes them. */
static const struct scan snapshot[] = {
        { "worker 0's older loop, in block_in_place", 3,
          { { 2648, A, R, 1, 0 }, { 2976, B, R, 2, 0 }, { 3128, H, R2, 3, 0 } } },
        { "worker 0 parked", 2, { { 2648, A, R, 1, 0 }, { 3040, H, R2, 3, 0 } } },
        { "worker 0's older loop, a copy of worker 1 deeper", 3,
          { { 2648, A, R, 1, 0 }, { 3128, H, R2, 3, 0 }, { 6032, B, R, 2, 0 } } },
        { "worker 0's older loop, no copy", 2, { { 2648, A, R, 1, 0 }, { 3128, H, R2, 3, 0 } } },
        { "worker 1 parked", 3, { { 2648, B, R, 2, 0 }, { 2976, A, R, 1, 0 }, { 3040, K, R2, 2, 0 } } },
        { "an idle pool thread", 0, { { 0 } } },
};
#define N_SNAPSHOT (sizeof(snapshot) / sizeof(snapshot[0]))

static void weigh(struct d9_wk_depth *d, const struct d9_wk_find *f, __u32 n)
{
        if (!d->depth)
                d9_wk_pending(d, f, n);
}

static void weigh_one(struct d9_wk_depth *d, __u64 depth, __u64 key, __u64 rt, __u32 index)
{
        struct d9_wk_find f = { depth, key, rt, index, 0 };

        weigh(d, &f, 1);
}

/* Workers 0 and 1 of runtime R (A, B) found at depth, `times` each. */
static void weigh_both_workers(struct d9_wk_depth *d, __u64 depth, int times)
{
        for (int i = 0; i < times; i++) {
                weigh_one(d, depth, A, R, 1);
                weigh_one(d, depth, B, R, 2);
        }
}

static const struct d9_wk_cand *cand_at(const struct d9_wk_depth *d, __u64 depth)
{
        for (int k = 0; k < D9_WK_CANDS; k++)
                if (d->cand[k].depth == depth)
                        return &d->cand[k];
        return NULL;
}

/* The snapshot's threads scanned in random orders: the search takes the
 * loop's depth or none yet, never a copy's. */
static void test_snapshot_any_order(void)
{
        unsigned runs = 20000, loop = 0, other = 0, none = 0;
        __u64 wrong = 0;

        srand(2648);
        for (unsigned r = 0; r < runs; r++) {
                struct d9_wk_depth d;

                memset(&d, 0, sizeof(d));
                for (int i = 0; i < 24 && !d.depth; i++) {
                        const struct scan *s = &snapshot[(unsigned)rand() % N_SNAPSHOT];

                        weigh(&d, s->f, s->n);
                }
                if (d.depth == LOOP)
                        loop++;
                else if (d.depth)
                        other++, wrong = d.depth;
                else
                        none++;
        }
        ok(other == 0 && loop > runs * 9 / 10,
           "24 scans of the snapshot's threads in random order: the loop's depth in %u of %u runs, none yet in %u, "
           "another depth in %u (%llu)", loop, runs, none, other, (unsigned long long)wrong);
}

/* A deeper depth that meets every rule (both workers, consistent, enough
 * finds) waits while the loop's depth above it, with two objects seen,
 * one of them worker 0, is in the running: the copies at 2,976 name the
 * right Arcs on the wrong threads. */
static void test_deeper_copy_waits(void)
{
        struct d9_wk_depth d;

        memset(&d, 0, sizeof(d));
        /* A 5-worker runtime: workers 0 and 4 have shown at the loop's depth. */
        weigh_one(&d, LOOP, A, R, 1);
        weigh_one(&d, LOOP, 0x98740, R, 5);
        weigh_both_workers(&d, 2976, 3);
        ok(!d.depth, "the copy's depth (6 consistent finds of workers 0 and 1) is not taken while the loop's depth "
                     "is in the running (took %llu)", (unsigned long long)d.depth);
        weigh_both_workers(&d, LOOP, 1);
        ok(d.depth == LOOP, "the loop's depth is taken once worker 1 shows there too (took %llu)",
           (unsigned long long)d.depth);
}

/* Objects of both indexes deeper (another "runtime" at 3,128) meet every
 * rule while the loop's depth has shown only worker 0: they wait (the
 * stripped 1.24 block_in_place target under CPU hogs, 1 of 3 tries: that
 * depth confirmed, workers 2 and 3 invented); the loop's depth is taken
 * once worker 1 shows there. One object alone at a shallower depth stops
 * counting once it has shown D9_WK_SHARED_HITS times (a shared one). */
static void test_deeper_both_indexes_wait_for_one_worker_above(void)
{
        struct d9_wk_depth d;
        int i;

        memset(&d, 0, sizeof(d));
        weigh_one(&d, LOOP, A, R, 1);
        for (i = 0; i < 3; i++) {
                weigh_one(&d, 3128, 0x99000, R2, 1);
                weigh_one(&d, 3128, 0x99100, R2, 2);
        }
        ok(!d.depth, "6 consistent finds of indexes 0 and 1 at 3,128 wait while worker 0 alone showed at the loop's "
                     "depth (took %llu)", (unsigned long long)d.depth);
        weigh_one(&d, LOOP, A, R, 1);
        weigh_both_workers(&d, LOOP, 1);
        ok(d.depth == LOOP, "the loop's depth is taken once worker 1 shows there (took %llu)",
           (unsigned long long)d.depth);

        memset(&d, 0, sizeof(d));
        for (i = 0; i < D9_WK_SHARED_HITS; i++)
                weigh_one(&d, 2416, 0x5000, R, 1);
        weigh_both_workers(&d, LOOP, 2);
        ok(d.depth == LOOP, "under one object shown %d times as worker 0 (shared), the loop's depth is taken (took "
           "%llu)", D9_WK_SHARED_HITS, (unsigned long long)d.depth);
}

/* npm ast-grep, its two workers parked from before the attach: the sweep
 * finds both at the loop's depth (2,816) while one object above (1,952,
 * index 1) has shown fewer than D9_WK_SHARED_HITS times; the pool
 * threads' own scans then show it again and again, and no worker's. The
 * loop's depth is taken once that object counts as shared, at the find
 * that makes it so. */
static void test_rival_above_turns_shared_later(void)
{
        struct d9_wk_depth d;
        int i;

        memset(&d, 0, sizeof(d));
        for (i = 0; i < 3; i++)
                weigh_one(&d, 1952, 0x5000, R, 2);
        weigh_both_workers(&d, 2816, 3);
        ok(!d.depth, "the loop's depth waits under an object above seen 3 times as worker 1 (took %llu)",
           (unsigned long long)d.depth);
        for (i = 3; i < D9_WK_SHARED_HITS - 1; i++)
                weigh_one(&d, 1952, 0x5000, R, 2);
        ok(!d.depth, "... and still at %d times (took %llu)", D9_WK_SHARED_HITS - 1, (unsigned long long)d.depth);
        weigh_one(&d, 1952, 0x5000, R, 2);
        ok(d.depth == 2816, "at its %dth find, a find of it and none of a worker, the loop's depth is taken (took %llu)",
           D9_WK_SHARED_HITS, (unsigned long long)d.depth);
}

/* npm restate-server 1.7.12: objects of other "runtimes" above the loop's
 * depth (464 and 472 bytes, its current-thread runtimes' threads), each
 * seen a few times, never D9_WK_SHARED_HITS; the loop's 800 bytes showed
 * workers 0 and 1 418 times and was never taken. It is once it has
 * D9_WK_OUTSHONE_HITS finds and D9_WK_OUTSHONE times the rival's. */
static void test_rival_above_outshone(void)
{
        struct d9_wk_depth d;
        int i;

        memset(&d, 0, sizeof(d));
        for (i = 0; i < 3; i++) {
                weigh_one(&d, 464, 0x7000, 0x1380, 1);
                weigh_one(&d, 464, 0x7100, 0x12f0, 2);
        }
        for (i = 0; i < 4; i++)
                weigh_one(&d, 472, 0x7200, 0x9c00, 1);
        weigh_both_workers(&d, 800, D9_WK_OUTSHONE_HITS / 2 - 1);
        ok(!d.depth, "%d finds at the loop's depth under rivals above seen 3-4 times: not yet (took %llu)",
           D9_WK_OUTSHONE_HITS - 2, (unsigned long long)d.depth);
        weigh_both_workers(&d, 800, 1);
        ok(d.depth == 800, "at %d finds, 16 times the rivals' 4: the loop's depth is taken (took %llu)",
           D9_WK_OUTSHONE_HITS, (unsigned long long)d.depth);

        memset(&d, 0, sizeof(d));
        for (i = 0; i < 8; i++)
                weigh_one(&d, 464, 0x7000, 0x1380, 1);
        weigh_both_workers(&d, 800, 40);
        ok(!d.depth, "80 finds under a rival seen 8 times (outshone only at 128): not yet (took %llu)",
           (unsigned long long)d.depth);
}

/* A shared object above (one Arc in every thread, 1.43's "index" 113) is
 * no rival, and neither is a depth ruled out by a contradiction. */
static void test_no_rival_above(void)
{
        struct d9_wk_depth d;

        memset(&d, 0, sizeof(d));
        for (int i = 0; i < 4; i++)
                weigh_one(&d, 2416, 0x5000, R, 114);
        weigh_one(&d, 2500, 0x6000, R, 1);
        weigh_one(&d, 2500, 0x6100, R, 1);      /* index 0 twice: ruled out */
        weigh_both_workers(&d, LOOP, 2);
        ok(d.depth == LOOP, "under one shared object and one ruled-out depth, the loop's depth is taken (took %llu)",
           (unsigned long long)d.depth);
}

/* Look-alikes at more depths than there are slots: the shallow ones are
 * kept, so the loop's depth keeps what it learnt, and a find below all of
 * them is not weighed. */
static void test_shallow_kept(void)
{
        struct d9_wk_depth d;
        const struct d9_wk_cand *c;

        memset(&d, 0, sizeof(d));
        weigh_both_workers(&d, LOOP, 1);
        for (__u64 depth = 3000; depth < 3000 + 16 * 64; depth += 64)
                weigh_one(&d, depth, 0x7000 + depth, R, 9);
        c = cand_at(&d, LOOP);
        ok(c && c->hits == 2 && c->n == 2, "16 deeper look-alike depths leave the loop's candidate as it was (%u hits)",
           c ? c->hits : 0);
        weigh_one(&d, 2600, 0x7100, R, 9);
        ok(cand_at(&d, 2600) && !cand_at(&d, 3000 + 6 * 64) && cand_at(&d, 3000 + 5 * 64),
           "a shallower one takes the deepest one's slot");
        weigh_one(&d, 9000, 0x7200, R, 9);
        ok(!cand_at(&d, 9000), "a find below every kept depth is not weighed");
        weigh_both_workers(&d, LOOP, 1);
        ok(d.depth == LOOP, "the loop's depth is taken (took %llu)", (unsigned long long)d.depth);
}

static void weigh_tid(struct d9_wk_depth *d, __u64 depth, __u64 key, __u64 rt, __u32 index, __u32 tid, int times)
{
        struct d9_wk_find f = { depth, key, rt, index, tid };

        for (int i = 0; i < times; i++)
                weigh(d, &f, 1);
}

/* A runtime with one worker (npm postgrestools under taskset -c 1: index 0
 * at the loop's depth, 247 finds, and index 1 of another "runtime" deeper,
 * 244): the two-worker rules take nothing, d9_wk_solo takes the loop's
 * depth, and not when the object shows on two threads, has shown too few
 * times, has a rival above, or its runtime has a worker 1 anywhere. */
static void test_solo_worker(void)
{
        struct d9_wk_depth d;

        memset(&d, 0, sizeof(d));
        weigh_tid(&d, LOOP, A, R, 1, 7, D9_WK_SOLO_HITS);
        weigh_tid(&d, 10608, 0x9000, R2, 2, 7, 30);
        ok(!d.depth && d9_wk_solo(&d) == LOOP,
           "one worker's loop, a look-alike of another runtime deeper: the two-worker rules take nothing (%llu), "
           "the one-worker rule the loop's depth (%llu)", (unsigned long long)d.depth,
           (unsigned long long)d9_wk_solo(&d));

        memset(&d, 0, sizeof(d));
        weigh_tid(&d, LOOP, A, R, 1, 7, D9_WK_SOLO_HITS - 1);
        ok(!d9_wk_solo(&d), "%d finds are too few (took %llu)", D9_WK_SOLO_HITS - 1,
           (unsigned long long)d9_wk_solo(&d));

        memset(&d, 0, sizeof(d));
        weigh_tid(&d, LOOP, A, R, 1, 7, D9_WK_SOLO_HITS);
        weigh_tid(&d, LOOP, A, R, 1, 8, 1);
        ok(!d9_wk_solo(&d), "the object on a second thread (shared, or a core block_in_place moved): none (took %llu)",
           (unsigned long long)d9_wk_solo(&d));

        memset(&d, 0, sizeof(d));
        weigh_tid(&d, LOOP, A, R, 1, 7, D9_WK_SOLO_HITS);
        weigh_tid(&d, 6032, B, R, 2, 7, 1);
        ok(!d9_wk_solo(&d), "a worker 1 of its runtime deeper (a copy: two workers): none (took %llu)",
           (unsigned long long)d9_wk_solo(&d));

        memset(&d, 0, sizeof(d));
        weigh_tid(&d, 1952, 0x5000, R, 1, 7, 3);
        weigh_tid(&d, LOOP, A, R, 1, 7, D9_WK_SOLO_HITS);
        ok(!d9_wk_solo(&d), "an object above still in the running: none (took %llu)",
           (unsigned long long)d9_wk_solo(&d));
}

/* npm @pagefind/linux-x64 1.6.0 pagefind_extended (musl static-pie,
 * stripped, Tokio 1.50, actix-web 4.13): the values of d9d's log of an
 * attach mid-run (pid 12810) and of a live read of the threads' stacks
 * (wkscan, same layout). The multi-thread runtime's 2 workers, idle, keep
 * their loop's Arc<Worker> 888 bytes below the TLS (core null); 240 bytes
 * below lies one Arc of the blocking pool's, the same object on every pool
 * thread, the workers' too (they are pool threads), strong 15, "index" 0,
 * its third word a pointer that never changes; at 1,080 two objects of
 * another "runtime", indexes 1 and 2 (one with its third word set), and a
 * copy of worker 1 at 1,000 (one find per object: not kept). */
enum {
        PF_RT = 0x7f5c7f646000, PF_W0 = 0x7f5c7f6400f0, PF_W1 = 0x7f5c7f640120,
        PF_POOL = 0x7f5c7f60b000, PF_POOL_RT = 0x7f5c7f635000, PF_POOL_CORE = 0x7f5c7f640030,
        PF_X_RT = 0x7f5c7f63b000, PF_X1 = 0x7f5c7f6400c0, PF_X1_CORE = 0x7f5c7f6400e8, PF_X2 = 0x7f5c7f640060,
};

static const struct scan pagefind_sweep[] = {
        { "worker 1, parked", 3,
          { { 240, PF_POOL, PF_POOL_RT, 1, 12811, PF_POOL_CORE }, { 888, PF_W1, PF_RT, 2, 12811, 0 },
            { 1080, PF_X1, PF_X_RT, 2, 12811, PF_X1_CORE } } },
        { "worker 0, parked", 3,
          { { 240, PF_POOL, PF_POOL_RT, 1, 12812, PF_POOL_CORE }, { 888, PF_W0, PF_RT, 1, 12812, 0 },
            { 1080, PF_X2, PF_X_RT, 3, 12812, 0 } } },
        { "an idle pool thread", 1, { { 240, PF_POOL, PF_POOL_RT, 1, 12830, PF_POOL_CORE } } },
};

/* The attach's sweep (two passes, every thread read at one instant) and
 * nothing after: the workers stay parked, the actix threads' own scans
 * show nothing of this runtime. The pool's shared Arc held the loop's
 * depth back for the whole recording (6 finds, never D9_WK_SHARED_HITS):
 * "no Worker depth confirmed in 8027 ms", the 2 workers on no id. Its
 * third word is set: no loop runs with it, so it is no find. */
static void test_pagefind_attach_idle_workers(void)
{
        unsigned orders = 0, loop = 0;
        __u64 wrong = 0;

        for (unsigned first = 0; first < 3; first++)
                for (unsigned rev = 0; rev < 2; rev++) {
                        struct d9_wk_depth d;

                        memset(&d, 0, sizeof(d));
                        for (int pass = 0; pass < 2; pass++)
                                for (unsigned i = 0; i < 3; i++) {
                                        unsigned k = (first + (rev ? 3 - i : i)) % 3;

                                        weigh(&d, pagefind_sweep[k].f, pagefind_sweep[k].n);
                                }
                        orders++;
                        if (d.depth == 888)
                                loop++;
                        else
                                wrong = d.depth;
                }
        ok(loop == orders, "pagefind, an attach's two sweep passes over 2 parked workers and a pool thread: the "
                           "loop's 888 bytes in %u of %u thread orders (else %llu)", loop, orders,
           (unsigned long long)wrong);
}

/* The same pagefind under `d9ctl record --`: the multi-thread runtime's
 * workers idle from the start (no stack of theirs), the actix-server
 * worker threads each drive a current-thread runtime whose stack holds,
 * 1,440 bytes below the TLS, an object of that shape with index 0 (pid
 * 25703's first 0x7fb9af006020; live: strong 1, its third word a pointer
 * to a file path or an HTTP date's text, another at every look), on one
 * thread only; the busy pool threads show their runtimes' shared Arcs at
 * 240 (third word set). After 500 ms d9_wk_solo took 1,440 ("the worker
 * loops' Worker lies 1440 bytes below the TLS, confirmed 2722 ms"): an
 * actix thread listed as worker 0 of runtime.main, its samples between
 * 254 and that id. */
static void test_pagefind_actix_lookalike_not_solo(void)
{
        struct d9_wk_depth d;
        static const __u64 strings[] = { 0x7fb9af00e390, 0x7fb9af007140, 0x7fb9af00e4b0, 0x7fb9af007100 };
        int i;

        memset(&d, 0, sizeof(d));
        for (i = 0; i < 40; i++) {
                struct d9_wk_find f[2] = {
                        { 240, 0x7fb9af203de0, 0x7fb9af2041c0, 1, 25720 + i % 5, 0x7fb9af20b120 },
                        { 1440, 0x7fb9af006020, 0x7fb9af009000, 1, 25711, strings[i % 4] },
                };

                weigh(&d, &f[0], 1);
                weigh(&d, &f[1], 1);
        }
        ok(!d.depth && !d9_wk_solo(&d),
           "pagefind's actix thread, 40 finds of its index-0 look-alike at 1,440 (third word set): no depth "
           "(%llu), the one-worker rule takes none (%llu)", (unsigned long long)d.depth,
           (unsigned long long)d9_wk_solo(&d));
        /* And now and then its third word is null (the recording of pid
         * 31453: "1440 ... confirmed 2650 ms into the search (1 candidate
         * depths)"): those finds alone, and the ones holding a pointer, in
         * either order. */
        for (int order = 0; order < 2; order++) {
                memset(&d, 0, sizeof(d));
                for (i = 0; i < 24; i++) {
                        struct d9_wk_find f = { 1440, 0x7fb9af006020, 0x7fb9af009000, 1, 31471,
                                                (order ? i % 3 == 2 : i % 3 != 2) ? 0 : strings[i % 4] };

                        weigh(&d, &f, 1);
                }
                ok(!d.depth && !d9_wk_solo(&d),
                   "... 8 of its 24 finds with the third word null, %s: the one-worker rule takes none (%llu)",
                   order ? "after one holding a pointer" : "a null one first", (unsigned long long)d9_wk_solo(&d));
        }

        /* `d9ctl record --` again (pid 820, d9_wk_depths read when
         * d9_wk_solo had taken 1,440 at 2,642 ms): both actix threads'
         * objects there, each its own "runtime", 8 and 7 finds, all with
         * the third word null (startup: the date not written yet). */
        memset(&d, 0, sizeof(d));
        weigh_tid(&d, 1440, 0x7f5e93618680, 0x7f5e9361b000, 1, 1066, 7);
        weigh_tid(&d, 1440, 0x7f5e93a06020, 0x7f5e93a0e000, 1, 1065, 8);
        ok(!d.depth && !d9_wk_solo(&d), "both actix threads' look-alikes at 1,440 (8 and 7 finds, third word null, "
                                        "two runtimes): the one-worker rule takes none (%llu)",
           (unsigned long long)d9_wk_solo(&d));

        /* Then the workers wake: their loop's depth is taken. */
        weigh_tid(&d, 888, PF_W0, PF_RT, 1, 25706, 2);
        weigh_tid(&d, 888, PF_W1, PF_RT, 2, 25705, 2);
        ok(d.depth == 888, "... and the workers' 888 bytes once both have shown (took %llu)",
           (unsigned long long)d.depth);

        /* A one-worker runtime's Worker (core null) is still taken. */
        memset(&d, 0, sizeof(d));
        for (i = 0; i < 3; i++)
                weigh(&d, pagefind_sweep[2].f, 1);
        weigh_tid(&d, 888, PF_W0, PF_RT, 1, 25706, D9_WK_SOLO_HITS);
        ok(d9_wk_solo(&d) == 888, "a one-worker runtime's loop at 888 under the pool's shared Arc: taken (%llu)",
           (unsigned long long)d9_wk_solo(&d));
}

/* What a Worker's handle points to: its runtime's Handle, an ArcInner, its
 * weak count at least 1 while any strong one lives. Deeper on pagefind's
 * actix threads (3,808 bytes: the two threads' d9_wk_solo rivals, 100
 * finds each, each its own "runtime") the object's handle word points to
 * a Tokio task's header: state 0xc0 (three references), then its queue
 * link, null or a pointer. */
static void test_pagefind_handle_is_an_arc(void)
{
        ok(d9_wk_handle_is_arc(0xf, 1), "pagefind's runtime Handle (strong 15, weak 1) is an Arc");
        ok(d9_wk_handle_is_arc(5, 1), "so is the actix look-alike's (strong 5, weak 1)");
        ok(!d9_wk_handle_is_arc(0xc0, 0), "a task header (state 0xc0, queue link null) is none");
        ok(!d9_wk_handle_is_arc(0xc0, 0x7fb9af01d000), "... nor with its queue link set");
}

int main(void)
{
        test_snapshot_any_order();
        test_deeper_copy_waits();
        test_deeper_both_indexes_wait_for_one_worker_above();
        test_no_rival_above();
        test_rival_above_outshone();
        test_rival_above_turns_shared_later();
        test_shallow_kept();
        test_solo_worker();
        test_pagefind_attach_idle_workers();
        test_pagefind_actix_lookalike_not_solo();
        test_pagefind_handle_is_an_arc();
        return tap_done();
}
