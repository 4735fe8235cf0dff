/* Internal interfaces between the pieces of d9ctl serve. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* Largest body we build for one request (decompressed segments together). */
#define SERVE_MAX_BODY ((size_t)2 << 30)

struct serve_buf {
        uint8_t *data;
        size_t len;
        size_t cap;
};

int serve_buf_reserve(struct serve_buf *b, size_t extra);
void serve_buf_free(struct serve_buf *b);

/* Opens the regular file REL (REL_LEN bytes, may hold a NUL to be refused)
 * strictly beneath the directory ROOTFD whose canonical path is ROOT_REAL.
 * Returns an fd, or -EINVAL (malformed: empty, absolute, "..", NUL, "//"),
 * -EACCES (resolves outside the root), -ENOENT, -EISDIR, other -errno. */
/* 1 if REL is a plain relative path (no "", ".", "..", "\\", NUL, leading
 * or trailing '/'). */
int serve_path_syntax_ok(const char *rel, size_t len);
int serve_path_open(int rootfd, const char *root_real, const char *rel, size_t rel_len);

/* Appends the decompressed content of FD (gzip, zstd or raw, detected by
 * magic) to OUT. -EBADMSG: corrupt compressed data; -EFBIG: over LIMIT. */
int serve_decompress_bytes(const uint8_t *data, size_t len, struct serve_buf *out, size_t limit);
int serve_decompress_append(int fd, struct serve_buf *out, size_t limit);

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
/* Appends segment REL (relative to the prefix) decompressed to OUT.
 * -EINVAL bad path, -ENOENT no such object, -EIO S3 failure, -EBADMSG. */
int serve_bucket_fetch_append(struct serve_bucket *b, const char *rel, size_t rel_len,
                              struct serve_buf *out, size_t limit);
/* Copy of the last S3 error message, for a response body. */
void serve_bucket_error(struct serve_bucket *b, char *buf, size_t size);
