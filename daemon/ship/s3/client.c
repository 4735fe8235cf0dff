/* The S3 client handle and the single-request object operations:
 * PUT, GET, HEAD, DELETE, CreateBucket and ListObjectsV2. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/ship/s3/s3_int.h"

static int copy_str(char **dst, const char *src)
{
        *dst = NULL;
        if (src && !(*dst = strdup(src)))
                return -ENOMEM;
        return 0;
}

static int copy_config(struct s3_config *dst, const struct s3_config *src)
{
        *dst = *src;
        int err = copy_str(&dst->bucket, src->bucket) | copy_str(&dst->prefix, src->prefix) |
                  copy_str(&dst->region, src->region ? src->region : "us-east-1") |
                  copy_str(&dst->endpoint, src->endpoint) |
                  copy_str(&dst->access_key, src->access_key) |
                  copy_str(&dst->secret_key, src->secret_key) |
                  copy_str(&dst->session_token, src->session_token) |
                  copy_str(&dst->profile, src->profile) | copy_str(&dst->instance, src->instance);
        return err ? -ENOMEM : 0;
}

/* Splits the endpoint into scheme and host[:port]; AWS when none is set. */
static int parse_endpoint(struct s3_client *c)
{
        const char *ep = c->cfg.endpoint;
        if (!ep || !*ep) {
                snprintf(c->scheme, sizeof c->scheme, "https");
                snprintf(c->host, sizeof c->host, "s3.%s.amazonaws.com", c->cfg.region);
                c->path_style = c->cfg.path_style > 0;
                return 0;
        }
        const char *sep = strstr(ep, "://");
        if (!sep || (size_t)(sep - ep) >= sizeof c->scheme)
                return -EINVAL;
        snprintf(c->scheme, sizeof c->scheme, "%.*s", (int)(sep - ep), ep);
        snprintf(c->host, sizeof c->host, "%s", sep + 3);
        c->host[strcspn(c->host, "/")] = 0; /* a trailing "/" or path is not part of the host */
        c->path_style = c->cfg.path_style != 0; /* custom endpoints default to path-style */
        return *c->host ? 0 : -EINVAL;
}

static void curl_init_once(void)
{
        curl_global_init(CURL_GLOBAL_DEFAULT);
}

int s3_client_new(const struct s3_config *cfg, struct s3_client **out)
{
        /* curl_easy_init() would do this implicitly, but not safely when the
         * shipper and `d9ctl serve` threads create clients at the same time. */
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, curl_init_once);
        struct s3_client *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        int err = copy_config(&c->cfg, cfg);
        if (!err && (!c->cfg.bucket || !c->cfg.access_key || !c->cfg.secret_key))
                err = -EINVAL;
        if (!err)
                err = parse_endpoint(c);
        if (!err && !(c->curl = curl_easy_init()))
                err = -ENOMEM;
        if (err) {
                s3_client_free(c);
                return err;
        }
        if (c->cfg.timeout_s <= 0)
                c->cfg.timeout_s = 300;
        *out = c;
        return 0;
}

void s3_client_free(struct s3_client *c)
{
        if (!c)
                return;
        if (c->curl)
                curl_easy_cleanup(c->curl);
        s3_config_free(&c->cfg);
        free(c);
}

const char *s3_client_last_error(const struct s3_client *c) { return c->last_error; }
int s3_client_last_status(const struct s3_client *c) { return (int)c->last_status; }
const struct s3_config *s3_client_config(const struct s3_client *c) { return &c->cfg; }
void s3_client_set_cancel_flag(struct s3_client *c, const volatile bool *flag) { c->cancel = flag; }

int s3_put_buffer(struct s3_client *c, const char *key, const void *data, size_t len,
                  const struct s3_put_opts *opts)
{
        struct s3_request r = {
                .method = "PUT", .key = key, .body = data, .body_len = len,
                .content_type = opts && opts->content_type ? opts->content_type
                                                           : "application/octet-stream",
                .meta = opts ? opts->meta : NULL, .n_meta = opts ? opts->n_meta : 0,
        };
        return s3_request_run(c, &r);
}

int s3_put_file(struct s3_client *c, const char *key, const char *path,
                const struct s3_put_opts *opts)
{
        struct stat st;
        int err, fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0) {
                err = -errno;
                s3_set_error(c, "open %s: %s", path, strerror(-err));
                if (fd >= 0)
                        close(fd);
                return err;
        }
        if ((uint64_t)st.st_size >= c->cfg.multipart_threshold && c->cfg.multipart_threshold) {
                err = s3_put_multipart(c, key, fd, (uint64_t)st.st_size, opts);
                close(fd);
                return err;
        }
        uint8_t *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
        ssize_t got = buf ? d9_read_full(fd, buf, (size_t)st.st_size, -1) : -ENOMEM;

        err = got < 0 ? (int)got : got != st.st_size ? -EIO /* file shrank under us */ : 0;
        close(fd);
        if (err == 0)
                err = s3_put_buffer(c, key, buf, (size_t)st.st_size, opts);
        else
                s3_set_error(c, "read %s: %s", path, strerror(-err));
        free(buf);
        return err;
}

int s3_get_object(struct s3_client *c, const char *key, struct d9_buf *out)
{
        struct s3_request r = { .method = "GET", .key = key, .response = out };
        out->len = 0;
        int err = s3_request_run(c, &r);
        if (err < 0)
                d9_buf_free(out); /* do not hand an error document back as data */
        return err;
}

int s3_get_object_head(struct s3_client *c, const char *key, uint64_t bytes, struct d9_buf *out)
{
        char range[64];

        if (!bytes)
                return -EINVAL;
        snprintf(range, sizeof(range), "bytes=0-%llu", (unsigned long long)(bytes - 1));
        struct s3_request r = { .method = "GET", .key = key, .range = range, .response = out };
        out->len = 0;
        int err = s3_request_run(c, &r);
        if (err < 0)
                d9_buf_free(out);
        /* A server that ignores Range sends the whole object: keep the head. */
        else if (out->len > bytes)
                out->len = (size_t)bytes;
        return err;
}

int s3_head_object(struct s3_client *c, const char *key, uint64_t *size)
{
        uint64_t len = 0;
        struct s3_request r = { .method = "HEAD", .key = key, .content_length = &len };
        int err = s3_request_run(c, &r);
        if (err == 0 && size)
                *size = len;
        return err;
}

int s3_head_object_meta(struct s3_client *c, const char *key, const char *name, char *value,
                        size_t size)
{
        struct s3_request r = { .method = "HEAD", .key = key, .want_meta = name,
                                .meta_value = value, .meta_size = size };
        value[0] = 0;
        int err = s3_request_run(c, &r);
        return err < 0 ? err : value[0] ? 0 : -ENODATA;
}

int s3_delete_object(struct s3_client *c, const char *key)
{
        struct s3_request r = { .method = "DELETE", .key = key };
        return s3_request_run(c, &r);
}

int s3_create_bucket(struct s3_client *c)
{
        struct s3_request r = { .method = "PUT", .key = NULL };
        return s3_request_run(c, &r);
}
