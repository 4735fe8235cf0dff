/* Internal interfaces between the pieces of d9ctl serve. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>
#include <zlib.h>
#include <zstd.h>

#include <limits.h>
#include <microhttpd.h>

#include "proto/d9proto.h"

/* Most bytes one response may carry (its segments decompressed together). */
#define SERVE_MAX_BODY ((uint64_t)2 << 30)
/* Largest file read whole into memory: a viewer asset, a bucket object. */
#define SERVE_MAX_OBJECT ((size_t)1 << 30)

/* Opens the regular file REL (REL_LEN bytes, may hold a NUL to be refused)
 * strictly beneath the directory ROOTFD whose canonical path is ROOT_REAL.
 * Returns an fd, or -EINVAL (malformed: empty, absolute, "..", NUL, "//"),
 * -EACCES (resolves outside the root), -ENOENT, -EISDIR, other -errno. */
/* 1 if REL is a plain relative path (no "", ".", "..", "\\", NUL, leading
 * or trailing '/'). */
int serve_path_syntax_ok(const char *rel, size_t len);
int serve_path_open(int rootfd, const char *root_real, const char *rel, size_t rel_len);

/* One segment decompressed as it is read (viewer/serve_stream.c): from FD
 * (owned, closed by serve_stream_close) or, with FD -1, from MEM. Output
 * is cut at d9_decompress_cap(COMPRESSED_SIZE) for compressed input. */
#define SERVE_STREAM_CHUNK (64u << 10)
struct serve_stream {
        int fd;
        const uint8_t *mem;
        uint8_t *in;                    /* SERVE_STREAM_CHUNK read from fd */
        size_t in_len, in_pos, in_total;
        bool in_eof;
        enum d9_compress kind;
        z_stream zs;
        bool zs_live, member_open, frame_open;
        ZSTD_DCtx *zd;
        uint64_t produced, cap;
};
int serve_stream_open(struct serve_stream *s, int fd, const uint8_t *mem, size_t mem_len,
                      uint64_t compressed_size);
/* Up to N bytes of output; 0 at the clean end; -EBADMSG corrupt or
 * truncated, -EFBIG over the cap, other -errno. */
ssize_t serve_stream_read(struct serve_stream *s, uint8_t *out, size_t n);
void serve_stream_close(struct serve_stream *s);

/* Walks ROOTFD and returns {"segments":[...]} describing every trace
 * segment found, with layout fields parsed from its path. NULL on ENOMEM. */
json_t *serve_list_segments(int rootfd);
/* 1 if NAME looks like a trace segment (.bin, .bin.gz, .bin.zst, .bin.active). */
int serve_is_segment_name(const char *name);
/* One listing entry for the segment at REL (path, size, layout fields). */
json_t *serve_segment_describe(const char *rel, uint64_t size, int64_t mtime);

/* Bucket mode (viewer/serve_bucket.c): segments in S3 under a prefix. */
struct serve_config;
struct serve_bucket;
int serve_bucket_open(const struct serve_config *cfg, struct serve_bucket **out);
void serve_bucket_free(struct serve_bucket *b);
/* {"segments":[...]} for every segment under the prefix; NULL on failure
 * with *err set (-errno) and serve_bucket_error() describing it. */
json_t *serve_bucket_list(struct serve_bucket *b, int *err);
/* Fetches segment REL (relative to the prefix), as stored, into OUT.
 * -EINVAL bad path, -ENOENT no such object, -EIO S3 failure. */
int serve_bucket_fetch(struct serve_bucket *b, const char *rel, size_t rel_len, struct d9_buf *out);
/* Its first BYTES bytes (a ranged GET), for what a listing reads cheaply. */
int serve_bucket_fetch_head(struct serve_bucket *b, const char *rel, size_t rel_len, uint64_t bytes,
                            struct d9_buf *out);
/* Copy of the last S3 error message, for a response body. */
void serve_bucket_error(struct serve_bucket *b, char *buf, size_t size);

/* Access (viewer/serve_auth.c): a random token printed at start. */
#define SERVE_TOKEN_BYTES 16
struct serve_auth {
        char token[2 * SERVE_TOKEN_BYTES + 1];
        char cookie[32];        /* cookie name, random per server */
};
enum serve_auth_result { SERVE_AUTH_DENIED, SERVE_AUTH_OK, SERVE_AUTH_SET_COOKIE };
int serve_auth_init(struct serve_auth *a);
/* SET_COOKIE: the token came in the URL, answer with Set-Cookie. */
enum serve_auth_result serve_auth_check(const struct serve_auth *a, struct MHD_Connection *conn);
void serve_auth_cookie_header(const struct serve_auth *a, char *buf, size_t size);

/* What every request handler shares (viewer/serve.c). */
struct serve_ctx {
        struct serve_bucket *bucket; /* bucket mode; else the local root below */
        int rootfd;
        char root_real[PATH_MAX];
        int assetfd;
        char asset_real[PATH_MAX];
        bool loopback; /* listening on loopback only: insist on a loopback Host */
        struct serve_auth auth;
};

struct serve_req {
        struct MHD_Connection *conn;
        struct serve_ctx *ctx;
        bool set_cookie;
};

/* Adds the common headers (type, no-store, CSP, Set-Cookie) and queues
 * RESP, which is consumed. */
enum MHD_Result serve_queue(struct serve_req *rq, unsigned status, const char *type,
                            struct MHD_Response *resp);
enum MHD_Result serve_reply_error(struct serve_req *rq, unsigned status, const char *what,
                                  const char *path);
/* serve_path_open()'s errors as an HTTP status and message. */
enum MHD_Result serve_reply_open_error(struct serve_req *rq, int err, const char *path);

/* GET /api/trace?seg=P[&seg=P...] (viewer/serve_trace.c). */
enum MHD_Result serve_trace(struct serve_req *rq);
/* True when REL's last part is a trace segment name (what may be served). */
bool serve_is_trace_path(const char *rel);
/* The reply for a segment that cannot be served: -EPERM (no trace file),
 * -EIO (bucket), path errors, -EBADMSG, -EFBIG, others. */
enum MHD_Result serve_reply_segment_error(struct serve_req *rq, int r, const char *path);
/* GET /api/info?seg=P (viewer/serve_info.c): one segment's time span. */
enum MHD_Result serve_info(struct serve_req *rq);
