/* GET /api/info?seg=P: what the recording list shows of one segment beyond
 * its path: when it starts (wall clock of its first event written), how
 * long it spans (to its latest event) and how many events it holds. None of
 * that is in a file name or a stat. A segment d9d sealed says it in its
 * first stream (D9SegmentSpanEvent, proto/segment_span.c): the first
 * D9_SPAN_HEAD_BYTES are decompressed, from the first chunk of the file or
 * a ranged GET of the object's first INFO_HEAD_OBJECT bytes, and the answer
 * says "source":"header". Any other segment (dial9's, an older d9d's, an
 * .active one) is decompressed and decoded whole: "source":"decoded".
 *
 * The same confinement as /api/trace (serve_path_open, trace names only) and
 * bounded work: at most INFO_MAX_RAW bytes after decompression, else 413.
 * An .active segment may end in a torn frame: decoded leniently. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serve_int.h"

#define INFO_MAX_RAW ((size_t)512 << 20)
/* Compressed bytes that hold the first D9_SPAN_HEAD_BYTES (flushed on their
 * own by the sealer's compressor): 4 KiB and a frame header. */
#define INFO_HEAD_OBJECT ((uint64_t)16 << 10)

struct info_span {
        uint64_t first_ts, last_ts;     /* first written, latest (ts 0 skipped) */
        uint64_t sync_ts, realtime_ns;  /* the first ClockSyncEvent */
        bool synced;
        uint64_t events;
};

static int info_event(const struct d9_dec_event *ev, void *ctx)
{
        struct info_span *s = ctx;

        /* Seal-time records (SymbolTableEntry, D9MappingEvent) carry ts 0:
         * no instant of the recording; the span event describes the others.
         * What is counted is what the sealer counts (sealer.c). */
        if (!ev->has_timestamp || !ev->ts || !strcmp(ev->schema->name, D9_SPAN_EVENT))
                return 0;
        s->events++;
        /* From the first event written (the segment's ClockSyncEvent, as
         * it opened) to the latest instant in it: an off-CPU sample is
         * stamped with its interval's start and may be older than the
         * segment, and a segment covers the time it was written. */
        if (!s->first_ts)
                s->first_ts = ev->ts;
        if (ev->ts > s->last_ts)
                s->last_ts = ev->ts;
        if (!s->synced && strcmp(ev->schema->name, "ClockSyncEvent") == 0) {
                for (uint16_t i = 0; i < ev->schema->nfields; i++) {
                        if (strcmp(ev->schema->fields[i].name, "realtime_ns") == 0 && ev->values[i].present) {
                                s->sync_ts = ev->ts;
                                s->realtime_ns = ev->values[i].u;
                                s->synced = true;
                        }
                }
        }
        return 0;
}

/* Opens the segment REL as a decompressing stream; HEAD: only the first
 * INFO_HEAD_OBJECT bytes of a bucket object are fetched (into OBJ). */
static int info_open(struct serve_ctx *ctx, const char *rel, size_t rel_len, bool head, struct d9_buf *obj,
                     struct serve_stream *st)
{
        struct stat sb;
        int r, fd;

        if (!serve_path_syntax_ok(rel, rel_len))
                return -EINVAL;
        if (!serve_is_trace_path(rel))
                return -EPERM;
        if (ctx->bucket) {
                r = head ? serve_bucket_fetch_head(ctx->bucket, rel, rel_len, INFO_HEAD_OBJECT, obj)
                         : serve_bucket_fetch(ctx->bucket, rel, rel_len, obj);
                return r < 0 ? r : serve_stream_open(st, -1, obj->data, obj->len, obj->len);
        }
        fd = serve_path_open(ctx->rootfd, ctx->root_real, rel, rel_len);
        if (fd < 0)
                return fd;
        if (fstat(fd, &sb) < 0)
                sb.st_size = 0;
        return serve_stream_open(st, fd, NULL, 0, (uint64_t)sb.st_size);
}

/* Up to CAP decompressed bytes into RAW (-EFBIG beyond INFO_MAX_RAW when
 * the whole segment is wanted). A head cut short inside a compressed block
 * keeps what came out before. */
static int info_read(struct serve_stream *st, struct d9_buf *raw, size_t cap)
{
        for (;;) {
                if (raw->len >= cap)
                        return 0;
                if (raw->len + SERVE_STREAM_CHUNK > INFO_MAX_RAW)
                        return -EFBIG;
                int r = d9_buf_reserve(raw, SERVE_STREAM_CHUNK);
                if (r < 0)
                        return r;
                size_t want = cap - raw->len < SERVE_STREAM_CHUNK ? cap - raw->len : SERVE_STREAM_CHUNK;
                ssize_t n = serve_stream_read(st, raw->data + raw->len, want);
                if (n <= 0)
                        return (int)n;
                raw->len += (size_t)n;
        }
}

/* The span the sealer wrote at the start: 0, 1 when the segment has to be
 * decoded instead, or an error of opening it. */
static int info_head(struct serve_ctx *ctx, const char *rel, size_t rel_len, struct d9_segment_span *span)
{
        struct d9_buf obj = { 0 }, raw = { 0 };
        struct serve_stream st = { .fd = -1 };
        int r = info_open(ctx, rel, rel_len, true, &obj, &st);

        if (r == 0) {
                /* A torn read past the span is no matter: it came first. */
                (void)info_read(&st, &raw, D9_SPAN_HEAD_BYTES);
                r = raw.len && d9_segment_span_read(raw.data, raw.len, span) == 0 ? 0 : 1;
        }
        serve_stream_close(&st);
        d9_buf_free(&obj);
        d9_buf_free(&raw);
        return r;
}

/* The segment REL decompressed into RAW. */
static int info_load(struct serve_ctx *ctx, const char *rel, size_t rel_len, struct d9_buf *raw)
{
        struct d9_buf obj = { 0 };
        struct serve_stream st = { .fd = -1 };
        int r = info_open(ctx, rel, rel_len, false, &obj, &st);

        if (r == 0)
                r = info_read(&st, raw, SIZE_MAX);
        serve_stream_close(&st);
        d9_buf_free(&obj);
        return r;
}

/* The whole segment decoded: what a span event would have said. */
static int info_decode(struct serve_ctx *ctx, const char *rel, struct d9_segment_span *span, bool *truncated)
{
        struct info_span s = { 0 };
        struct d9_dec_opts opts = { .strict = false, .on_event = info_event, .ctx = &s };
        struct d9_dec_result res;
        struct d9_buf raw = { 0 };
        int r = info_load(ctx, rel, strlen(rel), &raw);

        if (r == 0 && d9_decode(raw.data, raw.len, &opts, &res) < 0)
                r = -EBADMSG;
        d9_buf_free(&raw);
        if (r < 0)
                return r;
        *span = (struct d9_segment_span){ .first_ts = s.first_ts, .last_ts = s.last_ts, .events = s.events,
                                          .sync_ts = s.sync_ts, .realtime_ns = s.realtime_ns, .synced = s.synced };
        *truncated = res.truncated;
        return 0;
}

enum MHD_Result serve_info(struct serve_req *rq)
{
        const char *rel = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "seg");
        struct d9_segment_span span;
        bool truncated = false;
        int r;

        if (!rel)
                return serve_reply_error(rq, 400, "missing ?seg=PATH", NULL);
        r = info_head(rq->ctx, rel, strlen(rel), &span);
        const char *source = r == 0 ? "header" : "decoded";
        if (r == 1)
                r = info_decode(rq->ctx, rel, &span, &truncated);
        if (r < 0)
                return serve_reply_segment_error(rq, r, rel);

        json_t *o = json_pack("{s:s, s:I, s:I, s:b, s:s}", "path", rel, "events", (json_int_t)span.events,
                              "duration_ns",
                              (json_int_t)(span.last_ts >= span.first_ts ? span.last_ts - span.first_ts : 0),
                              "truncated", truncated, "source", source);
        /* Wall clock of the first event: ts + (realtime - sync ts). */
        if (o && span.synced && span.first_ts)
                json_object_set_new(o, "start_ns",
                                    json_integer((json_int_t)(span.realtime_ns + span.first_ts - span.sync_ts)));
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!text)
                return serve_reply_error(rq, 503, "out of memory", NULL);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(strlen(text), text, free);
        if (!resp) {
                free(text);
                return MHD_NO;
        }
        return serve_queue(rq, 200, "application/json", resp);
}
