/* GET /api/trace?seg=P[&seg=P...]: the raw trace bytes of the segments,
 * decompressed and concatenated (valid per trace-format 2.2).
 *
 * Only trace files are served (the names the listing shows: .bin, .bin.gz,
 * .bin.zst, .bin.active), never another file of the folder. Each segment is
 * decompressed twice, in SERVE_STREAM_CHUNK pieces: once to check it and
 * count its bytes (so a corrupt or oversized one gets a clear 4xx status
 * before any body is sent), then again as the body is sent. Memory per
 * request is a few chunks whatever the segments expand to; a segment may
 * not expand beyond d9_decompress_cap() of its size, nor the response
 * beyond SERVE_MAX_BODY. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serve_int.h"

#define SERVE_MAX_SEGMENTS 256

struct trace_job {
        struct serve_ctx *ctx;
        int count, cur;
        char *path[SERVE_MAX_SEGMENTS];
        struct d9_buf obj[SERVE_MAX_SEGMENTS]; /* bucket mode: objects as stored */
        uint64_t size[SERVE_MAX_SEGMENTS];        /* raw bytes counted in the check */
        struct serve_stream st;
        bool st_open;
        uint64_t st_left;
};

static void job_free(void *cls)
{
        struct trace_job *j = cls;

        if (j->st_open)
                serve_stream_close(&j->st);
        for (int i = 0; i < j->count; i++) {
                free(j->path[i]);
                d9_buf_free(&j->obj[i]);
        }
        free(j);
}

bool serve_is_trace_path(const char *rel)
{
        const char *base = strrchr(rel, '/');

        return serve_is_segment_name(base ? base + 1 : rel);
}

static enum MHD_Result collect_seg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size)
{
        struct trace_job *j = cls;

        if (strcmp(key, "seg") != 0)
                return MHD_YES;
        if (j->count == SERVE_MAX_SEGMENTS) {
                j->count++; /* too many: told apart by count > max */
                return MHD_NO;
        }
        /* a NUL inside the value stays visible to serve_path_syntax_ok */
        j->path[j->count] = malloc(value_size + 1);
        if (j->path[j->count]) {
                memcpy(j->path[j->count], value ? value : "", value ? value_size : 0);
                j->path[j->count][value ? value_size : 0] = '\0';
        }
        j->size[j->count++] = value ? value_size : 0;   /* the path length, for now */
        return MHD_YES;
}

/* A stream over segment I: the file beneath the root, or the object
 * fetched. ST is left as it was if the file cannot be opened. */
static int seg_open(struct trace_job *j, int i, size_t path_len, struct serve_stream *st)
{
        struct stat sb;
        int fd;

        if (j->ctx->bucket)
                return serve_stream_open(st, -1, j->obj[i].data, j->obj[i].len, j->obj[i].len);
        fd = serve_path_open(j->ctx->rootfd, j->ctx->root_real, j->path[i], path_len);
        if (fd < 0)
                return fd;
        if (fstat(fd, &sb) < 0)
                sb.st_size = 0;
        return serve_stream_open(st, fd, NULL, 0, (uint64_t)sb.st_size);
}

/* Decompresses segment I to nowhere: its raw size, or why it cannot be served. */
static int seg_check(struct trace_job *j, int i, size_t path_len, uint8_t *scratch, uint64_t *size)
{
        struct serve_stream st = { .fd = -1 };
        ssize_t n;
        int r;

        if (!serve_path_syntax_ok(j->path[i], path_len))
                return -EINVAL;
        if (!serve_is_trace_path(j->path[i]))
                return -EPERM;
        if (j->ctx->bucket && (r = serve_bucket_fetch(j->ctx->bucket, j->path[i], path_len, &j->obj[i])) < 0)
                return r;
        r = seg_open(j, i, path_len, &st);
        *size = 0;
        while (r == 0 && (n = serve_stream_read(&st, scratch, SERVE_STREAM_CHUNK)) != 0) {
                if (n < 0)
                        r = (int)n;
                else
                        *size += (uint64_t)n;
        }
        serve_stream_close(&st);
        return r;
}

static ssize_t job_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        struct trace_job *j = cls;

        for (;;) {
                if (!j->st_open) {
                        if (j->cur == j->count)
                                return MHD_CONTENT_READER_END_OF_STREAM;
                        if (seg_open(j, j->cur, strlen(j->path[j->cur]), &j->st) < 0) {
                                serve_stream_close(&j->st);
                                return MHD_CONTENT_READER_END_WITH_ERROR;
                        }
                        j->st_open = true;
                        j->st_left = j->size[j->cur];
                }
                if (j->st_left == 0) {
                        serve_stream_close(&j->st);
                        j->st_open = false;
                        j->cur++;
                        continue;
                }
                ssize_t n = serve_stream_read(&j->st, (uint8_t *)buf, max < j->st_left ? max : (size_t)j->st_left);
                if (n <= 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR; /* changed since the check */
                j->st_left -= (uint64_t)n;
                return n;
        }
}

enum MHD_Result serve_reply_segment_error(struct serve_req *rq, int r, const char *path)
{
        char msg[512];

        switch (r) {
        case -EPERM:
                return serve_reply_error(rq, 403, "not a trace file (.bin, .bin.gz, .bin.zst, .bin.active)", path);
        case -EIO:
                serve_bucket_error(rq->ctx->bucket, msg, sizeof(msg));
                return serve_reply_error(rq, 502, "cannot fetch segment from the bucket", msg);
        case -EINVAL: case -EACCES: case -ELOOP: case -ENOENT: case -ENOTDIR: case -EISDIR:
                return serve_reply_open_error(rq, r, path);
        case -EBADMSG:
                return serve_reply_error(rq, 422, "corrupt compressed segment", path);
        case -EFBIG:
                snprintf(msg, sizeof(msg), "%s (expands more than %ux its size, or beyond %u MiB in all)",
                         path, D9_DECOMPRESS_RATIO, (unsigned)(SERVE_MAX_BODY >> 20));
                return serve_reply_error(rq, 413, "segment too large to serve", msg);
        default:
                return serve_reply_error(rq, r == -ENOMEM ? 503 : 500, strerror(-r), path);
        }
}

enum MHD_Result serve_trace(struct serve_req *rq)
{
        struct trace_job *j = calloc(1, sizeof(*j));
        uint8_t *scratch = malloc(SERVE_STREAM_CHUNK);
        uint64_t total = 0;
        enum MHD_Result ret;

        if (!j || !scratch) {
                free(j);
                free(scratch);
                return serve_reply_error(rq, 503, "out of memory", NULL);
        }
        j->ctx = rq->ctx;
        j->st.fd = -1;
        MHD_get_connection_values_n(rq->conn, MHD_GET_ARGUMENT_KIND, collect_seg, j);
        if (j->count > SERVE_MAX_SEGMENTS) {
                j->count = SERVE_MAX_SEGMENTS;
                ret = serve_reply_error(rq, 400, "too many segments in one request", NULL);
                goto out;
        }
        if (j->count == 0) {
                ret = serve_reply_error(rq, 400, "missing ?seg=PATH", NULL);
                goto out;
        }
        for (int i = 0; i < j->count; i++) {
                if (!j->path[i]) {
                        ret = serve_reply_error(rq, 503, "out of memory", NULL);
                        goto out;
                }
                size_t path_len = (size_t)j->size[i];
                int r = seg_check(j, i, path_len, scratch, &j->size[i]);
                if (r == 0 && (total += j->size[i]) > SERVE_MAX_BODY)
                        r = -EFBIG;
                if (r < 0) {
                        ret = serve_reply_segment_error(rq, r, j->path[i]);
                        goto out;
                }
        }
        free(scratch);
        struct MHD_Response *resp = MHD_create_response_from_callback(total, SERVE_STREAM_CHUNK, job_read, j, job_free);
        if (!resp) {
                job_free(j);
                return MHD_NO;
        }
        return serve_queue(rq, 200, "application/octet-stream", resp);
out:
        free(scratch);
        job_free(j);
        return ret;
}
