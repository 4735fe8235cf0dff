/* A segment's span in its first few bytes: D9SegmentSpanEvent.
 *
 * When a segment starts and how long it lasts are in no path or stat, and
 * reading them off the events means decoding the whole segment. So the
 * writer puts a D9SegmentSpanEvent right after the file's first
 * ClockSyncEvent, in the first stream, with three fixed-width I64 fields
 * left zero (first_ts, last_ts, events); the sealer, which decodes the
 * segment anyway, overwrites those 24 bytes in place with what it counted.
 * The compressors flush the first D9_SPAN_HEAD_BYTES on their own
 * (compress.c), so a reader gets the span from the first few KiB of even a
 * compressed segment, or of an S3 object through a ranged GET.
 *
 * dial9's readers keep the event as one of unknown type and ignore it; it
 * has a timestamp (that of the ClockSyncEvent before it) as dial9's viewer
 * requires of every event. Zeros mean "not sealed" (an .active segment, or
 * one a crash left): the reader then has to decode. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "bytes.h"
#include "d9proto.h"

static const struct d9_field_def span_fields[] = {
        { "first_ts", D9_T_I64 },
        { "last_ts", D9_T_I64 },
        { "events", D9_T_I64 },
};
static const struct d9_schema_def span_schema = { D9_SPAN_EVENT, 3, span_fields };

/* tag, u16 type id, u24 timestamp delta: the values follow. */
#define EVENT_FRAME_HEAD 6

int d9_enc_segment_span(struct d9_enc *enc, uint64_t ts, const struct d9_segment_span *s)
{
        int schema = d9_enc_declare(enc, &span_schema);
        const struct d9_enc_value v[] = {
                { .i64 = (int64_t)s->first_ts }, { .i64 = (int64_t)s->last_ts }, { .i64 = (int64_t)s->events },
        };

        return schema < 0 ? schema : d9_enc_event(enc, schema, ts, v);
}

struct span_find {
        struct d9_segment_span *out;
        bool found;
};

static bool span_schema_is_ours(const struct d9_dec_schema *s)
{
        if (strcmp(s->name, D9_SPAN_EVENT) || s->nfields != 3)
                return false;
        for (int i = 0; i < 3; i++)
                if (strcmp(s->fields[i].name, span_fields[i].name) || s->fields[i].type != D9_T_I64)
                        return false;
        return true;
}

static int span_find_event(const struct d9_dec_event *ev, void *ctx)
{
        struct span_find *f = ctx;

        if (ev->stream > 0)
                return 1; /* only the first stream holds it */
        if (!f->out->synced && !strcmp(ev->schema->name, "ClockSyncEvent") && ev->schema->nfields == 1 &&
            ev->values[0].present) {
                f->out->sync_ts = ev->ts;
                f->out->realtime_ns = ev->values[0].u;
                f->out->synced = true;
        }
        if (!span_schema_is_ours(ev->schema))
                return 0;
        f->out->first_ts = (uint64_t)ev->values[0].i64;
        f->out->last_ts = (uint64_t)ev->values[1].i64;
        f->out->events = (uint64_t)ev->values[2].i64;
        f->out->values_offset = ev->offset + EVENT_FRAME_HEAD;
        f->found = true;
        return 1;
}

int d9_segment_span_read(const uint8_t *raw, size_t len, struct d9_segment_span *out)
{
        struct span_find f = { .out = out };
        struct d9_dec_opts opts = { .strict = false, .on_event = span_find_event, .ctx = &f };
        struct d9_dec_result res;

        memset(out, 0, sizeof(*out));
        int r = d9_decode(raw, len, &opts, &res);
        if (r < 0)
                return r;
        if (!f.found)
                return -ENOENT;
        return out->events ? 0 : -ENODATA;
}

int d9_segment_span_patch(int fd, const struct d9_segment_span *s)
{
        uint8_t head[D9_SPAN_HEAD_BYTES], vals[24];
        struct d9_segment_span at;
        ssize_t n = pread(fd, head, sizeof(head), 0);

        if (n < 0)
                return -errno;
        int r = d9_segment_span_read(head, (size_t)n, &at);
        if (r < 0 && r != -ENODATA)
                return r;
        if (at.values_offset + sizeof(vals) > (size_t)n)
                return -EBADMSG;
        put_u64(put_u64(put_u64(vals, s->first_ts), s->last_ts), s->events);
        n = pwrite(fd, vals, sizeof(vals), (off_t)at.values_offset);
        if (n < 0)
                return -errno;
        return n == (ssize_t)sizeof(vals) ? 0 : -EIO;
}
