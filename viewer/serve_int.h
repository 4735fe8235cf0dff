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
int serve_path_open(int rootfd, const char *root_real, const char *rel, size_t rel_len);

/* Appends the decompressed content of FD (gzip, zstd or raw, detected by
 * magic) to OUT. -EBADMSG: corrupt compressed data; -EFBIG: over LIMIT. */
int serve_decompress_append(int fd, struct serve_buf *out, size_t limit);

/* Walks ROOTFD and returns {"segments":[...]} describing every trace
 * segment found, with layout fields parsed from its path. NULL on ENOMEM. */
json_t *serve_list_segments(int rootfd);
