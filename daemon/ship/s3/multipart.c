/* Multipart upload for large segments: CreateMultipartUpload, one UploadPart
 * per cfg.part_size bytes (each hashed for its own signature),
 * CompleteMultipartUpload; AbortMultipartUpload when any step fails so the
 * store keeps no orphaned parts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/ship/s3/s3_int.h"

static int create_upload(struct s3_client *c, const char *key, const struct s3_put_opts *opts,
                         char **upload_id)
{
        struct s3_query q[] = { { "uploads", NULL } };
        struct d9_buf body = { 0 };
        struct s3_request r = {
                .method = "POST", .key = key, .query = q, .n_query = 1, .response = &body,
                .content_type = opts && opts->content_type ? opts->content_type
                                                           : "application/octet-stream",
                .meta = opts ? opts->meta : NULL, .n_meta = opts ? opts->n_meta : 0,
        };
        int err = s3_request_run(c, &r);
        if (err == 0) {
                const char *pos = (const char *)body.data;
                *upload_id = body.data ? s3_xml_next((char *)body.data, &pos, "UploadId") : NULL;
                if (!*upload_id) {
                        s3_set_error(c, "POST %s?uploads: no UploadId in the answer", key);
                        err = -EBADMSG;
                }
        }
        d9_buf_free(&body);
        return err;
}

static int upload_part(struct s3_client *c, const char *key, const char *upload_id, unsigned num,
                       const uint8_t *data, size_t len, char etag[128])
{
        char num_s[16];
        snprintf(num_s, sizeof num_s, "%u", num);
        struct s3_query q[] = { { "partNumber", num_s }, { "uploadId", upload_id } };
        struct s3_request r = {
                .method = "PUT", .key = key, .query = q, .n_query = 2, .body = data,
                .body_len = len, .etag = etag, .etag_size = 128,
        };
        etag[0] = 0;
        int err = s3_request_run(c, &r);
        if (err == 0 && !etag[0]) {
                s3_set_error(c, "PUT %s part %u: no ETag in the answer", key, num);
                err = -EBADMSG;
        }
        return err;
}

static int complete_upload(struct s3_client *c, const char *key, const char *upload_id,
                           char (*etags)[128], unsigned n)
{
        struct d9_buf doc = { 0 };
        char line[256];
        int err = d9_buf_append(&doc, "<CompleteMultipartUpload>", 25);
        for (unsigned i = 0; i < n && !err; i++) {
                char *etag = s3_xml_escape(etags[i]);
                int len = snprintf(line, sizeof line, "<Part><PartNumber>%u</PartNumber><ETag>%s</ETag></Part>",
                                   i + 1, etag ? etag : "");
                free(etag);
                err = d9_buf_append(&doc, line, (size_t)len);
        }
        if (!err)
                err = d9_buf_append(&doc, "</CompleteMultipartUpload>", 26);
        struct s3_query q[] = { { "uploadId", upload_id } };
        struct d9_buf answer = { 0 };
        struct s3_request r = {
                .method = "POST", .key = key, .query = q, .n_query = 1, .body = doc.data,
                .body_len = doc.len, .content_type = "application/xml", .response = &answer,
        };
        if (!err)
                err = s3_request_run(c, &r);
        /* S3 may report a failed completion inside a 200 answer. */
        if (err == 0 && answer.data && strstr((char *)answer.data, "<Error>")) {
                s3_set_error(c, "POST %s?uploadId: completion failed: %.200s", key, (char *)answer.data);
                err = -EIO;
        }
        d9_buf_free(&answer);
        d9_buf_free(&doc);
        return err;
}

static void abort_upload(struct s3_client *c, const char *key, const char *upload_id)
{
        char saved[S3_ERR_MAX];
        memcpy(saved, c->last_error, sizeof saved); /* report the failure, not the cleanup */
        struct s3_query q[] = { { "uploadId", upload_id } };
        struct s3_request r = { .method = "DELETE", .key = key, .query = q, .n_query = 1 };
        s3_request_run(c, &r);
        memcpy(c->last_error, saved, sizeof saved);
}

static int upload_parts(struct s3_client *c, const char *key, const char *upload_id, int fd,
                        uint64_t size, char (*etags)[128], unsigned n_parts)
{
        uint64_t part = c->cfg.part_size;
        uint8_t *buf = malloc(part);
        int err = buf ? 0 : -ENOMEM;
        for (unsigned i = 0; i < n_parts && !err; i++) {
                uint64_t off = (uint64_t)i * part;
                size_t len = (size_t)(size - off < part ? size - off : part);
                ssize_t got = d9_read_full(fd, buf, len, (off_t)off);
                if (got != (ssize_t)len) {
                        err = got < 0 ? -errno : -EIO;
                        s3_set_error(c, "read part %u of %s: %s", i + 1, key, strerror(-err));
                        break;
                }
                err = upload_part(c, key, upload_id, i + 1, buf, len, etags[i]);
        }
        free(buf);
        return err;
}

int s3_put_multipart(struct s3_client *c, const char *key, int fd, uint64_t size,
                     const struct s3_put_opts *opts)
{
        if (c->cfg.part_size == 0) {
                s3_set_error(c, "multipart upload of %s: part size is 0", key);
                return -EINVAL;
        }
        unsigned n_parts = (unsigned)((size + c->cfg.part_size - 1) / c->cfg.part_size);
        if (n_parts == 0 || n_parts > 10000) {
                s3_set_error(c, "multipart upload of %s: %u parts (S3 allows 1..10000)", key, n_parts);
                return -EINVAL;
        }
        char *upload_id = NULL;
        char (*etags)[128] = calloc(n_parts, sizeof *etags);
        int err = etags ? create_upload(c, key, opts, &upload_id) : -ENOMEM;
        if (err == 0)
                err = upload_parts(c, key, upload_id, fd, size, etags, n_parts);
        if (err == 0)
                err = complete_upload(c, key, upload_id, etags, n_parts);
        if (err < 0 && upload_id)
                abort_upload(c, key, upload_id);
        free(upload_id);
        free(etags);
        return err;
}
