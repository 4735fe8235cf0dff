/* Bucket mode of d9ctl serve: lists and fetches segments from S3 (or any
 * S3-compatible store) through daemon/ship/s3's client. Keys are shown relative
 * to --prefix, and a client-supplied path is checked with the same syntax
 * rules as local paths before it becomes a key, so a request cannot reach
 * objects outside the prefix. Credentials come from the environment or the
 * shared credentials file (s3_config_resolve). The client is not thread-safe
 * and MHD runs one thread per connection, hence the mutex. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/ship/s3/s3.h"
#include "serve.h"
#include "serve_int.h"

struct serve_bucket {
        struct s3_client *client;
        char *prefix; /* without trailing '/', NULL for the whole bucket */
        pthread_mutex_t lock;
};

int serve_bucket_open(const struct serve_config *cfg, struct serve_bucket **out)
{
        struct s3_config s3 = { 0 };
        struct serve_bucket *b;
        const char *why = NULL;
        int r;

        s3_config_init(&s3);
        if ((r = s3_config_set(&s3, "s3_bucket", cfg->bucket, &why)) < 0 ||
            (cfg->prefix && *cfg->prefix && (r = s3_config_set(&s3, "s3_prefix", cfg->prefix, &why)) < 0) ||
            (cfg->endpoint && (r = s3_config_set(&s3, "s3_endpoint", cfg->endpoint, &why)) < 0) ||
            (r = s3_config_resolve(&s3, &why)) < 0) {
                fprintf(stderr, "d9ctl serve: bucket %s: %s\n", cfg->bucket, why ? why : strerror(-r));
                s3_config_free(&s3);
                return r;
        }
        b = calloc(1, sizeof(*b));
        if (!b) {
                s3_config_free(&s3);
                return -ENOMEM;
        }
        r = s3_client_new(&s3, &b->client);
        if (r == 0 && s3.prefix && *s3.prefix && !(b->prefix = strdup(s3.prefix)))
                r = -ENOMEM;
        s3_config_free(&s3);
        if (r < 0) {
                fprintf(stderr, "d9ctl serve: cannot create S3 client for %s: %s\n", cfg->bucket,
                        strerror(-r));
                serve_bucket_free(b);
                return r;
        }
        pthread_mutex_init(&b->lock, NULL);
        *out = b;
        return 0;
}

void serve_bucket_free(struct serve_bucket *b)
{
        if (!b)
                return;
        s3_client_free(b->client);
        free(b->prefix);
        free(b);
}

void serve_bucket_error(struct serve_bucket *b, char *buf, size_t size)
{
        pthread_mutex_lock(&b->lock);
        const char *e = s3_client_last_error(b->client);
        snprintf(buf, size, "%s", e && *e ? e : "S3 request failed");
        pthread_mutex_unlock(&b->lock);
}

static int64_t parse_iso8601(const char *s)
{
        struct tm tm = { 0 };
        if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
                return 0;
        return (int64_t)timegm(&tm);
}

json_t *serve_bucket_list(struct serve_bucket *b, int *err)
{
        struct s3_listing l = { 0 };
        char prefix[PATH_MAX];
        size_t plen = 0;
        json_t *list;

        if (b->prefix)
                plen = (size_t)snprintf(prefix, sizeof(prefix), "%s/", b->prefix);
        pthread_mutex_lock(&b->lock);
        *err = s3_list(b->client, b->prefix ? prefix : NULL, NULL, 0, &l);
        pthread_mutex_unlock(&b->lock);
        if (*err < 0)
                return NULL;
        list = json_array();
        for (size_t i = 0; list && i < l.n_objects; i++) {
                const char *key = l.objects[i].key;
                const char *rel = key + (plen && strncmp(key, prefix, plen) == 0 ? plen : 0);
                const char *base = strrchr(rel, '/');

                if (!serve_is_segment_name(base ? base + 1 : rel) || !serve_path_syntax_ok(rel, strlen(rel)))
                        continue;
                json_t *seg = serve_segment_describe(rel, l.objects[i].size,
                                                     parse_iso8601(l.objects[i].last_modified));
                if (!seg || json_array_append_new(list, seg) < 0) {
                        json_decref(list);
                        list = NULL;
                }
        }
        s3_listing_free(&l);
        if (!list) {
                *err = -ENOMEM;
                return NULL;
        }
        return json_pack("{s:o}", "segments", list);
}

/* The object REL (its first HEAD bytes, 0: all of it) into OUT. */
static int bucket_get(struct serve_bucket *b, const char *rel, size_t rel_len, uint64_t head,
                      struct d9_buf *out)
{
        struct d9_buf obj = { 0 };
        char key[PATH_MAX];
        int r;

        if (!serve_path_syntax_ok(rel, rel_len))
                return -EINVAL;
        if ((size_t)snprintf(key, sizeof(key), "%s%s%s", b->prefix ? b->prefix : "",
                             b->prefix ? "/" : "", rel) >= sizeof(key))
                return -EINVAL;
        pthread_mutex_lock(&b->lock);
        r = head ? s3_get_object_head(b->client, key, head, &obj) : s3_get_object(b->client, key, &obj);
        pthread_mutex_unlock(&b->lock);
        if (r == 0 && obj.len > SERVE_MAX_OBJECT)
                r = -EFBIG;
        else if (r == 0) {
                /* the object's buffer becomes the caller's */
                *out = obj;
                obj = (struct d9_buf){ 0 };
        } else if (r != -ENOENT) {
                r = -EIO;
        }
        d9_buf_free(&obj);
        return r;
}

int serve_bucket_fetch(struct serve_bucket *b, const char *rel, size_t rel_len, struct d9_buf *out)
{
        return bucket_get(b, rel, rel_len, 0, out);
}

int serve_bucket_fetch_head(struct serve_bucket *b, const char *rel, size_t rel_len, uint64_t bytes,
                            struct d9_buf *out)
{
        return bytes ? bucket_get(b, rel, rel_len, bytes, out) : -EINVAL;
}
