/* attach_poll.c: see attach_poll.h. */
#include "daemon/record/attach_poll.h"
#include "daemon/record/translate.h"

/* What a D9LongPollEvent promises (long_poll.c LONG_POLL_MIN_NS). */
#define ATTACH_POLL_MIN_NS (1000 * 1000ull)

int attach_poll_enable(struct translate *tr, long_poll_vaddr_fn vaddr_of, void *ctx)
{
        int r = long_poll_ranges(tr, vaddr_of, ctx);

        tr->attach_polls = r == 0 && tr->n_lp_ranges;
        return r;
}

/* Since when a sample inside a poll proves that poll began earlier: the
 * uprobes' start (0: they were in before the first record). */
static uint64_t uprobes_since(const struct translate *tr)
{
        return tr->uprobes_from_ts ? tr->uprobes_from_ts : tr->first_ts;
}

void attach_poll_on_stack(struct translate *tr, struct tr_thread *t, uint64_t stack_id, const uint64_t *frames,
                          uint32_t n, uint32_t n_kern)
{
        if (!tr->attach_polls)
                return;
        long_poll_pool_on_stack(tr, t, frames, n, n_kern);
        if (t->ap_done)
                return;
        t->ap_stack = stack_id;
        t->ap_stack_poll = long_poll_task_frame(tr, frames, n, n_kern);
        /* A job running since before the attach has no poll start of its
         * own to say its thread is the pool's (npm sideseat: 416 of 416 of
         * such a job's samples read 255 in the full set). */
        t->ap_job = long_poll_job_frame(tr, frames, n, n_kern) != 0;
}

void attach_poll_on_sample(struct translate *tr, struct tr_thread *t, uint64_t ts, uint64_t stack_id,
                           uint32_t stack_atom)
{
        if (!tr->attach_polls || tr->attach_polls_lost || t->ap_done || tr->uprobes_from_ts == UINT64_MAX ||
            ts < uprobes_since(tr) ||
            !stack_id || t->ap_stack != stack_id || !t->ap_stack_poll)
                return;
        /* Another poll frame with no start in between: an unwind gone
         * wrong, not a second poll. */
        if (t->ap_poll && t->ap_poll != t->ap_stack_poll)
                return;
        t->ap_poll = t->ap_stack_poll;
        t->ap_last = ts;
        t->ap_n++;
        t->ap_atom = stack_atom;
        t->ap_gen = tr->enc_gen;
}

void attach_poll_records_lost(struct translate *tr)
{
        tr->attach_polls_lost = true;
}

static int write_poll(struct translate *tr, struct tr_thread *t)
{
        uint64_t since = uprobes_since(tr);
        struct long_poll_seen lp = {
                .cookie = t->ap_poll - 1, .min_ns = t->ap_last > since ? t->ap_last - since : 0,
                .ticks = t->ap_n, .how = "at attach", .ts = t->ap_last,
                .stack_atom = t->ap_gen == tr->enc_gen ? t->ap_atom : tr->empty_stack,
        };
        int r;

        if (lp.min_ns < ATTACH_POLL_MIN_NS)
                return 0;
        r = long_poll_write(tr, t, &lp);
        tr->events += r == 0;
        return r;
}

int attach_poll_own_record(struct translate *tr, struct tr_thread *t)
{
        int r = 0;

        if (!tr->attach_polls || t->ap_done)
                return 0;
        if (t->ap_poll)
                r = write_poll(tr, t);
        t->ap_done = true;
        t->ap_poll = 0;
        return r;
}

int attach_poll_flush(struct translate *tr)
{
        for (size_t i = 0; tr->attach_polls && i < tr->threads_cap; i++) {
                struct tr_thread *t = &tr->threads[i];
                int r;

                if (t->tid && t->ap_poll && !t->ap_done && (r = write_poll(tr, t)) < 0)
                        return r;
        }
        return 0;
}
