/* record_hold.c: an append-only byte log of records, replayed once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/record/record_hold.h"
#include "proto/d9proto.h"

#define ALIGN8(n) (((n) + 7) & ~(size_t)7)

int record_hold_push(struct record_hold *h, const void *rec, size_t size)
{
        size_t need = 8 + ALIGN8(size);
        uint32_t sz = (uint32_t)size;

        /* Replayed bytes make room (a replay runs in parts). */
        if (h->pos && h->len + need > h->cap) {
                memmove(h->buf, h->buf + h->pos, h->len - h->pos);
                h->len -= h->pos;
                h->pos = 0;
        }
        if (size > RECORD_HOLD_MAX || h->len + need > RECORD_HOLD_MAX) {
                if (!h->dropped++)
                        h->first_ts = d9_now_ns();
                return -ENOSPC;
        }
        if (h->len + need > h->cap) {
                size_t cap = h->cap ? h->cap : 64 * 1024;
                uint8_t *n;

                while (cap < h->len + need)
                        cap *= 2;
                if (cap > RECORD_HOLD_MAX)
                        cap = RECORD_HOLD_MAX;
                n = realloc(h->buf, cap);
                if (!n) {
                        if (!h->dropped++)
                                h->first_ts = d9_now_ns();
                        return -ENOSPC;
                }
                h->buf = n;
                h->cap = cap;
        }
        memcpy(h->buf + h->len, &sz, sizeof(sz));
        memcpy(h->buf + h->len + 8, rec, size);
        h->len += need;
        h->kept++;
        return 0;
}

bool record_hold_replay_some(struct record_hold *h, int (*fn)(void *ctx, const void *rec, size_t size), void *ctx,
                             uint64_t until_ns, uint64_t *stopped_left)
{
        unsigned n = 0;

        while (h->pos < h->len) {
                uint32_t sz;

                memcpy(&sz, h->buf + h->pos, sizeof(sz));
                h->kept--;
                if (fn(ctx, h->buf + h->pos + 8, sz) != 0) {
                        *stopped_left += h->kept;
                        h->pos = h->len;
                        break;
                }
                h->pos += 8 + ALIGN8(sz);
                if (++n % 64 == 0 && d9_now_ns() >= until_ns)
                        return h->pos < h->len;
        }
        free(h->buf);
        h->buf = NULL;
        h->len = h->cap = h->pos = 0;
        h->kept = 0;
        return false;
}

uint64_t record_hold_replay(struct record_hold *h, int (*fn)(void *ctx, const void *rec, size_t size), void *ctx)
{
        uint64_t left = h->kept;
        size_t off = h->pos;

        while (off < h->len) {
                uint32_t sz;

                memcpy(&sz, h->buf + off, sizeof(sz));
                left--;
                if (fn(ctx, h->buf + off + 8, sz) != 0)
                        break;
                off += 8 + ALIGN8(sz);
        }
        if (off >= h->len)
                left = 0;
        free(h->buf);
        h->buf = NULL;
        h->len = h->cap = h->pos = 0;
        h->kept = 0;
        return left;
}

void record_hold_free(struct record_hold *h)
{
        free(h->buf);
        h->buf = NULL;
        h->len = h->cap = h->pos = 0;
}
