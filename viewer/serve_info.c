/* GET /api/info?seg=P: what the recording list shows of one segment beyond
 * its path: when it starts (wall clock of its first event written), how
 * long it spans (to its latest event) and how many events it holds. None of that is in a file name or a stat, so the segment
 * is decompressed and decoded; the browser asks for each listed row in the
 * background, so the list itself stays a directory walk.
 *
 * The same confinement as /api/trace (serve_path_open, trace names only) and
 * bounded work: at most INFO_MAX_RAW bytes after decompression, else 413.
 * An .active segment may end in a torn frame: decoded leniently. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serve_int.h"

#define INFO_MAX_RAW ((size_t)512 << 20)

struct info_span {
        uint64_t first_ts, last_ts;     /* first written, latest (ts 0 skipped) */
        uint64_t sync_ts, realtime_ns;  /* the first ClockSyncEvent */
        bool synced;
        uint64_t events;
};

static int info_event(const struct d9_dec_event *ev, void *ctx)
{
        struct info_span *s = ctx;

        s->events++;
        /* Seal-time records (SymbolTableEntry, D9MappingEvent) carry ts 0:
         * no instant of the recording. */
        if (!ev->has_timestamp || !ev->ts)
                return 0;
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

/* The segment REL decompressed into RAW. */
static int info_load(struct serve_ctx *ctx, const char *rel, size_t rel_len, struct d9_buf *raw)
{
        struct d9_buf obj = { 0 };
        struct serve_stream st = { .fd = -1 };
        struct stat sb;
        ssize_t n;
        int r, fd = -1;

        if (!serve_path_syntax_ok(rel, rel_len))
                return -EINVAL;
        if (!serve_is_trace_path(rel))
                return -EPERM;
        if (ctx->bucket) {
                r = serve_bucket_fetch(ctx->bucket, rel, rel_len, &obj);
                if (r == 0)
                        r = serve_stream_open(&st, -1, obj.data, obj.len, obj.len);
        } else {
                fd = serve_path_open(ctx->rootfd, ctx->root_real, rel, rel_len);
                if (fd < 0)
                        return fd;
                if (fstat(fd, &sb) < 0)
                        sb.st_size = 0;
                r = serve_stream_open(&st, fd, NULL, 0, (uint64_t)sb.st_size);
        }
        while (r == 0) {
                if (raw->len + SERVE_STREAM_CHUNK > INFO_MAX_RAW) {
                        r = -EFBIG;
                        break;
                }
                if ((r = d9_buf_reserve(raw, SERVE_STREAM_CHUNK)) < 0)
                        break;
                n = serve_stream_read(&st, raw->data + raw->len, SERVE_STREAM_CHUNK);
                if (n <= 0) {
                        r = (int)n;
                        break;
                }
                raw->len += (size_t)n;
        }
        serve_stream_close(&st);
        d9_buf_free(&obj);
        return r;
}

enum MHD_Result serve_info(struct serve_req *rq)
{
        const char *rel = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "seg");
        struct info_span span = { 0 };
        struct d9_dec_opts opts = { .strict = false, .on_event = info_event, .ctx = &span };
        struct d9_dec_result res;
        struct d9_buf raw = { 0 };
        int r;

        if (!rel)
                return serve_reply_error(rq, 400, "missing ?seg=PATH", NULL);
        r = info_load(rq->ctx, rel, strlen(rel), &raw);
        if (r == 0 && d9_decode(raw.data, raw.len, &opts, &res) < 0)
                r = -EBADMSG;
        d9_buf_free(&raw);
        if (r < 0)
                return serve_reply_segment_error(rq, r, rel);

        json_t *o = json_pack("{s:s, s:I, s:I, s:b}", "path", rel, "events", (json_int_t)span.events,
                              "duration_ns", (json_int_t)(span.last_ts >= span.first_ts ? span.last_ts - span.first_ts : 0), "truncated",
                              res.truncated);
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
