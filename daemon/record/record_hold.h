/* record_hold: a target's ring records kept, in order, while the probe plan
 * that translating them needs is still being built (a session records from
 * its attach on; the plan of a 300 MB binary takes 0.6-2.5 s). Bounded: past
 * RECORD_HOLD_MAX bytes records are counted, not kept. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RECORD_HOLD_MAX (8u << 20)      /* one ring's worth (d9d's default ring_bytes) */

struct record_hold {
        uint8_t *buf;                   /* [u32 size][size bytes, padded to 8] ... */
        size_t len, cap;
        size_t pos;                     /* replayed up to here */
        uint64_t kept, dropped;         /* records */
        uint64_t first_ts;              /* d9_now_ns of the first one dropped, 0: none */
};

/* Keep one record; -ENOSPC (counted in dropped) when the hold is full. */
int record_hold_push(struct record_hold *h, const void *rec, size_t size);
/* Hand every kept record to fn in order, until fn returns non-zero; then
 * empty the hold. Returns the records not handed over (fn stopped). */
uint64_t record_hold_replay(struct record_hold *h, int (*fn)(void *ctx, const void *rec, size_t size), void *ctx);
/* The same, a part at a time, so a drain loop turn stays short: records in
 * order until until_ns (d9_now_ns) passes; more may be pushed meanwhile.
 * Returns true while records are left; *stopped: fn returned non-zero (the
 * rest then count in *stopped_left and the hold is emptied). */
bool record_hold_replay_some(struct record_hold *h, int (*fn)(void *ctx, const void *rec, size_t size), void *ctx,
                             uint64_t until_ns, uint64_t *stopped_left);
void record_hold_free(struct record_hold *h);
