/* d9_wk_search.h: how the default set's Worker search weighs what its
 * scans find (d9_stack_worker in d9_stack.bpf.h), apart from the reads, so
 * the host test tests/bpf/wk_search.c runs the same rules.
 *
 * The includer provides __u32, __u64, bool and __always_inline. */
#pragma once

/* Per target slot: where below the thread pointer the Worker lies, once two
 * threads have shown two different workers of one runtime there (same
 * Handle, different Arc, different index). One find proves little: a
 * shared object that fits the shape was seen above the Worker in every
 * pool thread (1.43 test builds: index 113 at 2,416 bytes, the Worker at
 * 2,784; index 114 at 2,432, the Worker at 2,872 in the frame-pointer
 * build, there for the whole run in 1 of 8 runs). It is the same Arc in
 * every thread, so it never confirms, and a scan that stopped at its first
 * find never got past it: a scan keeps its first D9_WK_FINDS finds, one
 * per object. Per-thread look-alikes lie below the Worker too (the
 * block_in_place target: "index" 3 at 3,200 and 3,288 bytes, another Arc
 * in each thread; biome: 7,296, the Worker at 7,040), so two finds alone
 * confirm nothing: each depth (with its runtime) is a candidate that
 * collects the (Arc, index) pairs seen there, and a Worker's pairs never
 * contradict each other (Tokio's index of a worker is fixed, one Arc per
 * index): a pair with a known Arc and another index, or a known index and
 * another Arc, rules the depth out for good. Look-alikes that kept to
 * that rule still showed "indexes" no runtime starts from (biome: 1 and 2;
 * the block_in_place target: 0 and 2), while every multi-thread runtime
 * has workers 0 and 1: a depth is confirmed once both showed there,
 * consistent over D9_WK_HITS finds, and no depth above it is still in the
 * running (d9_wk_above). Copies of the real Workers lie below the loop's
 * frame and keep to every rule (gdb, the 1.24 block_in_place target: the
 * Worker at 2,648 bytes; at 2,976 and 6,032 the Arcs of worker 0 and 1,
 * stale or copied, often on the other worker's thread; at 3,128 pairs of
 * both), and one of them confirmed first in 2 of 3 tries of a CI run: 4
 * ids moving between threads, more by thread. The loop's own frame is
 * the outermost, so the shallow candidates are the ones kept.
 * (Several CPUs update the candidates without a lock, so a race can mix
 * two candidates' pairs; a confirmation still needs both indexes,
 * consistent over several finds.) Until then nothing is reported;
 * from then on every stack looks at that depth (one word, then the
 * Worker's two reads), so a loop's end and a new one show at once. Kept
 * with the target's since_ts: a slot's next target learns its own. */
#define D9_WK_FINDS 4           /* finds kept per scan */
#define D9_WK_CANDS 8           /* candidate depths kept per target */
#define D9_WK_PAIRS 4           /* (Arc, index) pairs kept per candidate */
#define D9_WK_HITS 4            /* consistent finds before a confirmation */
#define D9_WK_SHARED_HITS 16    /* finds of one object alone: shared, no rival */
#define D9_WK_OUTSHONE 16       /* ... or this many times fewer than the depth below */
#define D9_WK_OUTSHONE_HITS 64  /* ... once that depth has this many */

struct d9_wk_find {
        __u64 depth, key, rt;
        __u32 index;            /* 1 + Tokio's index */
        __u32 tid;              /* the scanned thread */
        __u64 core;             /* the Worker's third word (its core): null while its loop runs */
};

struct d9_wk_cand {
        __u64 depth, rt;        /* depth 0: a free slot */
        __u64 key[D9_WK_PAIRS];
        __u32 index[D9_WK_PAIRS];
        __u32 n;                /* pairs kept */
        __u32 hits;             /* finds consistent with them */
        __u32 ruled_out;        /* two pairs contradicted each other */
        __u32 first_two;        /* bit i: index i (0 or 1) seen */
        __u32 tid;              /* the first thread its finds came from */
        __u32 threads;          /* 1: one thread so far; 2: more */
        __u32 held_core;        /* one of its objects was seen holding a core */
};

struct d9_wk_depth {
        __u64 since;
        __u64 tls;              /* the d9_wk_tls the depth is below */
        __u64 depth;            /* confirmed; 0: not yet */
        struct d9_wk_cand cand[D9_WK_CANDS];
        __u32 misses;           /* full scans that found nothing */
        __u64 first_ts;         /* the target's first scan */
        __u64 confirmed_ts;     /* when depth was confirmed (d9d's status) */
};

/* Whether the two words at a Worker-shaped object's handle are an
 * ArcInner's counts, as its runtime Handle's are: a strong count of at
 * least 2 (every worker and task holds the Handle) and a weak one of at
 * least 1 (an Arc's weak count keeps 1 for all its strong ones). npm
 * pagefind 1.6.0's actix-server worker threads (current-thread runtimes)
 * hold, 3,808 bytes below the TLS, an object whose "handle" is a Tokio
 * task's header: state 0xc0 (three references), then its queue link, null
 * or a pointer. One per thread, index 0, each its own "runtime": 100 finds
 * each, a one-worker runtime's shape (d9_wk_solo) once nothing shallower
 * was. */
static __always_inline bool d9_wk_handle_is_arc(__u64 strong, __u64 weak)
{
        return strong >= 2 && strong < (1 << 24) && weak - 1 < (1 << 24);
}

/* Whether a find can be a running loop's Worker: Tokio's run() takes the
 * core out of the Worker (Worker::core, an AtomicCell) before the loop
 * starts, and the loop keeps it in its context, parked or not; the Worker
 * holds it again only while no loop runs with it (block_in_place handed
 * it over and no stand-in has taken it yet, or before the launch). Finds
 * whose third word is set are not weighed, nor kept by a scan. npm
 * pagefind 1.6.0: the blocking pool's shared Arc, 240 bytes below the TLS
 * on every pool thread and so on both workers' (strong 15, "index" 0, its
 * third word one pointer for good), had 6 finds of the attach's sweep and
 * no more (the workers idle), so it held their loop's 888 bytes back for
 * the whole recording (d9_wk_above: one object under D9_WK_SHARED_HITS);
 * and on an actix-server worker thread an index-0 object at 1,440 bytes
 * (its third word a pointer to a path or an HTTP date's text, another at
 * every look) was taken by d9_wk_solo for a one-worker runtime's Worker. */
static __always_inline bool d9_wk_find_runs(const struct d9_wk_find *f)
{
        return !f->core;
}

/* A find holding a core marks the candidate of its depth and runtime that
 * knows its object (it creates none): that object is no single worker's
 * loop (d9_wk_solo). pagefind's actix look-alike at 1,440 bytes holds a
 * pointer there at most looks, text at others, and now and then null: its
 * null ones alone, 8 and more from one thread, were taken by d9_wk_solo
 * ("confirmed 2650 ms into the search (1 candidate depths)"). A single
 * worker's Worker holds its core only while block_in_place hands it over;
 * such a worker kept its ids by thread before as well. */
static __always_inline void d9_wk_weigh_held(struct d9_wk_depth *d, const struct d9_wk_find *f)
{
        for (int k = 0; k < D9_WK_CANDS; k++) {
                struct d9_wk_cand *c = &d->cand[k];

                if (c->depth != f->depth || c->rt != f->rt)
                        continue;
                for (__u32 p = 0; p < D9_WK_PAIRS; p++)
                        if (p < c->n && c->key[p] == f->key)
                                c->held_core = 1;
        }
}

/* The slot of f's candidate: the one of its depth and runtime, else a free
 * slot, else a ruled-out one (forgotten), else the deepest if f lies above
 * it; -1: every slot holds a depth above f's. One pass per rule and an
 * index, not pointers: the verifier gave up on the pointers' states. */
static __always_inline int d9_wk_slot_of(const struct d9_wk_depth *d, const struct d9_wk_find *f)
{
        __u64 deepest = f->depth;
        int k, slot = -1;

        for (k = 0; k < D9_WK_CANDS; k++)
                if (d->cand[k].depth == f->depth && d->cand[k].rt == f->rt)
                        return k;
        for (k = 0; k < D9_WK_CANDS; k++)
                if (!d->cand[k].depth)
                        return k;
        for (k = 0; k < D9_WK_CANDS; k++)
                if (d->cand[k].ruled_out)
                        return k;
        for (k = 0; k < D9_WK_CANDS; k++) {
                if (d->cand[k].depth > deepest) {
                        deepest = d->cand[k].depth;
                        slot = k;
                }
        }
        return slot;
}

/* The candidate for f's depth and runtime (a new one replaces what
 * d9_wk_slot_of chose), or NULL: f is not weighed. */
static __always_inline struct d9_wk_cand *d9_wk_cand_of(struct d9_wk_depth *d, const struct d9_wk_find *f)
{
        int k = d9_wk_slot_of(d, f);
        struct d9_wk_cand *c;

        if (k < 0 || k >= D9_WK_CANDS)
                return NULL;
        c = &d->cand[k];
        if (c->depth == f->depth && c->rt == f->rt)
                return c;
        c->depth = f->depth;
        c->rt = f->rt;
        c->n = 0;
        c->hits = 0;
        c->ruled_out = 0;
        c->first_two = 0;
        c->tid = 0;
        c->threads = 0;
        c->held_core = 0;
        return c;
}

/* Whether a depth above c is still in the running: an object showed there
 * as worker 0 or 1, and none contradicted another. Until it is ruled out
 * (or confirms itself), c may be a copy of what lies there. One object
 * alone counts until it has shown D9_WK_SHARED_HITS times: then it is one
 * shared by every thread (a look-alike), while a loop's Worker shows
 * another worker's Arc as soon as that worker's thread is scanned. (Two
 * objects were needed: the 1.24 block_in_place target under CPU hogs had
 * seen only worker 0 at the loop's 2,648 bytes when objects of both
 * indexes at 3,128 confirmed, 1 of 3 tries: workers 2 and 3 invented.)
 * Nor does one object seen D9_WK_OUTSHONE times fewer than c, once c has
 * D9_WK_OUTSHONE_HITS finds: a loop's Worker is on its thread's stack at
 * every scan while the loop runs, so it shows at least as often as any
 * object scanned on the same threads. npm restate-server 1.7.12: 418
 * finds of workers 0 and 1 at the loop's 800 bytes, and above it, at 464
 * and 472, objects of other "runtimes" seen 2-6 times each in 5 s (its 24
 * current-thread runtimes' threads), never 16: no depth confirmed, its 2
 * workers read as 3 threads' ids and a worker's thread as none. */
static __always_inline bool d9_wk_above(const struct d9_wk_depth *d, const struct d9_wk_cand *c)
{
        for (int k = 0; k < D9_WK_CANDS; k++) {
                const struct d9_wk_cand *o = &d->cand[k];
                bool outshone = c->hits >= D9_WK_OUTSHONE_HITS && c->hits >= D9_WK_OUTSHONE * o->hits;

                if (o->depth && o->depth < c->depth && !o->ruled_out && o->first_two &&
                    (o->n >= 2 || (o->hits < D9_WK_SHARED_HITS && !outshone)))
                        return true;
        }
        return false;
}

/* Whether c, not ruled out, meets every rule: both first workers shown,
 * consistent over D9_WK_HITS finds, and no depth above it in the running. */
static __always_inline bool d9_wk_confirms(const struct d9_wk_depth *d, const struct d9_wk_cand *c)
{
        return c->first_two == 3 && c->hits >= D9_WK_HITS && !d9_wk_above(d, c);
}

/* One find of a full scan, before the depth is confirmed: held against its
 * candidate's pairs. True when it confirms the depth. */
static __always_inline bool d9_wk_weigh(struct d9_wk_depth *d, const struct d9_wk_find *f)
{
        struct d9_wk_cand *c;
        bool seen = false;

        if (!d9_wk_find_runs(f)) {
                d9_wk_weigh_held(d, f);
                return false;
        }
        c = d9_wk_cand_of(d, f);
        if (!c || c->ruled_out)
                return false;
        for (__u32 k = 0; k < D9_WK_PAIRS; k++) {
                if (k >= c->n)
                        break;
                if (c->key[k] == f->key && c->index[k] == f->index)
                        seen = true;
                else if (c->key[k] == f->key || c->index[k] == f->index)
                        c->ruled_out = 1;
        }
        if (c->ruled_out)
                return false;
        c->hits++;
        if (!seen && c->n < D9_WK_PAIRS) {
                c->key[c->n & (D9_WK_PAIRS - 1)] = f->key;
                c->index[c->n & (D9_WK_PAIRS - 1)] = f->index;
                c->n++;
        }
        if (f->index == 1 || f->index == 2)
                c->first_two |= f->index;
        if (!c->threads)
                c->tid = f->tid, c->threads = 1;
        else if (c->tid != f->tid)
                c->threads = 2;
        return d9_wk_confirms(d, c);
}

/* The shallowest depth that meets every rule now, or 0. A depth held back
 * by a rival above is freed by a find of the rival (past
 * D9_WK_SHARED_HITS, or ruled out), not of its own, and idle workers give
 * none: npm ast-grep's two parked workers showed 6 consistent finds at the
 * loop's 2,816 bytes in the attach's sweep while one word at 1,952 (index
 * 1) had shown fewer than 16 times; the busy pool threads' scans then took
 * it to 115, and nothing confirmed the loop until the workers woke. */
static __always_inline __u64 d9_wk_settled(const struct d9_wk_depth *d)
{
        __u64 depth = 0;

        for (int k = 0; k < D9_WK_CANDS; k++) {
                const struct d9_wk_cand *c = &d->cand[k];

                if (c->depth && !c->ruled_out && (!depth || c->depth < depth) && d9_wk_confirms(d, c))
                        depth = c->depth;
        }
        return depth;
}

/* A runtime with one worker (worker_threads(1), or a container's single
 * CPU, which Tokio's default follows) never shows worker 1, so no depth
 * met the rules: its worker had an id by thread and the report said no
 * Worker was found on its stacks (npm postgrestools under taskset -c 1:
 * 247 finds of index 0 at the loop's 2,608 bytes, the depth two workers
 * confirm). Once the search has run D9_WK_SOLO_NS, the shallowest depth
 * whose finds are one object, index 0, from one thread only, at least
 * D9_WK_SOLO_HITS of them, with no depth above it in the running and no
 * worker 1 of its runtime anywhere, is taken. One thread: an object shared
 * by every pool thread (a look-alike) shows on several; so does a worker
 * whose core block_in_place moved, which keeps its id by thread. A
 * look-alike of another runtime (postgrestools: index 1 at 10,608 bytes,
 * 244 finds) is no rival below it. Nor is an object ever seen holding a
 * core taken (d9_wk_weigh_held), nor one at a depth where another
 * runtime's object showed too (d9_wk_depth_shared_by_rts). */
#define D9_WK_SOLO_NS (500 * 1000000ull)
#define D9_WK_SOLO_HITS 8

static __always_inline bool d9_wk_rt_has_worker1(const struct d9_wk_depth *d, __u64 rt)
{
        for (int k = 0; k < D9_WK_CANDS; k++)
                if (d->cand[k].depth && d->cand[k].rt == rt && (d->cand[k].first_two & 2))
                        return true;
        return false;
}

/* Whether another runtime's object showed at c's depth, not ruled out:
 * per-thread look-alikes of several runtimes, one on each thread, a
 * current-thread runtime's each (npm pagefind 1.6.0 under `d9ctl record
 * --`: the two actix-server worker threads, an index-0 object 1,440 bytes
 * below the TLS on each, its own "runtime" each, its third word null at
 * startup and an HTTP date's text later, 8 and 7 finds when d9_wk_solo took
 * the first; before, 3,808 bytes the same). Two single-worker runtimes
 * would show so too: they keep their ids by thread. */
static __always_inline bool d9_wk_depth_shared_by_rts(const struct d9_wk_depth *d, const struct d9_wk_cand *c)
{
        for (int k = 0; k < D9_WK_CANDS; k++) {
                const struct d9_wk_cand *o = &d->cand[k];

                if (o->depth == c->depth && o->rt != c->rt && !o->ruled_out)
                        return true;
        }
        return false;
}

static __always_inline __u64 d9_wk_solo(const struct d9_wk_depth *d)
{
        __u64 depth = 0;

        for (int k = 0; k < D9_WK_CANDS; k++) {
                const struct d9_wk_cand *c = &d->cand[k];

                if (c->depth && !c->ruled_out && !c->held_core && c->first_two == 1 && c->n == 1 && c->threads == 1 &&
                    c->hits >= D9_WK_SOLO_HITS && (!depth || c->depth < depth) && !d9_wk_above(d, c) &&
                    !d9_wk_rt_has_worker1(d, c->rt) && !d9_wk_depth_shared_by_rts(d, c))
                        depth = c->depth;
        }
        return depth;
}

/* The finds of a full scan whose objects held a core (d9_wk_find_runs),
 * kept apart so they take none of D9_WK_FINDS. */
static __always_inline void d9_wk_pending_held(struct d9_wk_depth *d, const struct d9_wk_find *held, __u32 n_held)
{
        for (__u32 i = 0; i < D9_WK_FINDS; i++) {
                if (i >= n_held)
                        break;
                d9_wk_weigh_held(d, &held[i]);
        }
}

/* The finds of a full scan (outermost first), before the depth is
 * confirmed. */
static __always_inline void d9_wk_pending(struct d9_wk_depth *d, const struct d9_wk_find *finds, __u32 n_finds)
{
        for (__u32 i = 0; i < D9_WK_FINDS; i++) {
                if (i >= n_finds)
                        break;
                if (d9_wk_weigh(d, &finds[i])) {
                        d->depth = finds[i].depth;
                        return;
                }
        }
        if (n_finds)
                d->depth = d9_wk_settled(d);
}

/* Whether a scan of this target ever found a Worker-shaped word. Until
 * one has, scans that find nothing tell of a runtime without Workers; once
 * one has, they are threads that run no loop (a blocking pool's, the
 * block_in_place target's many) and say nothing: counted, at an attach's
 * burst of stacks they ended the search within milliseconds, before two
 * workers had shown, and every worker got an id by thread (1 of 3 tries in
 * a CI run, the stripped block_in_place target under CPU hogs). */
static __always_inline bool d9_wk_any_cand(const struct d9_wk_depth *d)
{
        for (int k = 0; k < D9_WK_CANDS; k++)
                if (d->cand[k].depth)
                        return true;
        return false;
}
