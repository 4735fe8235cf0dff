/* d9s3: a small S3 client (SigV4, path-style or virtual-hosted) for shipping
 * sealed trace segments and for browsing a bucket from `d9ctl serve`.
 *
 * Library functions return 0 or a negative errno. Requests that reached the
 * server but failed also store a one-line human message in the client
 * (s3_client_last_error()), e.g. "PUT d9/a.bin.gz: HTTP 403
 * SignatureDoesNotMatch: The request signature we calculated ...". Secrets
 * never appear in messages or logs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "proto/d9proto.h" /* struct d9_buf: response bodies */

/* ---- configuration ---------------------------------------------------- */

struct s3_config {
        char *bucket;
        char *prefix;           /* key prefix without trailing '/', may be NULL */
        char *region;           /* default us-east-1 */
        char *endpoint;         /* e.g. http://127.0.0.1:8080; NULL = AWS */
        int path_style;         /* -1 = auto: path-style for a custom endpoint */
        char *access_key;
        char *secret_key;
        char *session_token;
        char *profile;          /* shared credentials file profile */
        char *instance;         /* key component; NULL = host name */
        uint64_t multipart_threshold; /* files >= this go multipart */
        uint64_t part_size;           /* bytes per part (last may be less) */
        long timeout_s;               /* whole-request timeout */
        uint64_t max_upload_rate;     /* bytes/s per request, 0 = unlimited */
        unsigned list_page_size;      /* keys per LIST request, 0 = server default (1000) */
};

#define S3_DEFAULT_MULTIPART_THRESHOLD (64ull << 20)
#define S3_DEFAULT_PART_SIZE (16ull << 20)
#define S3_MIN_PART_SIZE (5ull << 20) /* S3's rule for all but the last part */

void s3_config_init(struct s3_config *cfg);
void s3_config_free(struct s3_config *cfg);
/* Apply one d9d.conf setting. Keys: s3_bucket, s3_prefix, s3_region,
 * s3_endpoint, s3_path_style (yes/no), s3_access_key_id,
 * s3_secret_access_key, s3_session_token, s3_profile, s3_instance,
 * s3_multipart_threshold, s3_part_size and s3_max_upload_rate (bytes/s;
 * K/M/G suffixes), s3_timeout (seconds). Returns 0, -ENOENT for a key that is not an S3 key (so the
 * caller can try its own keys), or -EINVAL with *why set. */
int s3_config_set(struct s3_config *cfg, const char *key, const char *value, const char **why);
/* Fill in credentials not given in the config file: first the environment
 * (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), then the
 * shared credentials file (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials,
 * profile s3_profile, else AWS_PROFILE, else "default"). Also takes
 * AWS_REGION / AWS_DEFAULT_REGION when no region is set. Returns 0, or
 * -ENOKEY with *why set when no complete key pair was found, -EINVAL when
 * the bucket is missing. */
int s3_config_resolve(struct s3_config *cfg, const char **why);

/* ---- client ----------------------------------------------------------- */

struct s3_client;

/* The client keeps its own copy of cfg. One client per thread. */
int s3_client_new(const struct s3_config *cfg, struct s3_client **out);
void s3_client_free(struct s3_client *c);
const char *s3_client_last_error(const struct s3_client *c);
int s3_client_last_status(const struct s3_client *c); /* HTTP status, 0 = none */
const struct s3_config *s3_client_config(const struct s3_client *c);
/* Abort in-flight requests when *flag becomes true (checked ~every 100 ms). */
void s3_client_set_cancel_flag(struct s3_client *c, const volatile bool *flag);

struct s3_meta {
        const char *name;       /* without the x-amz-meta- prefix, lower case */
        const char *value;
};

struct s3_put_opts {
        const char *content_type;       /* NULL = application/octet-stream */
        const struct s3_meta *meta;
        size_t n_meta;
};

/* Upload a local file: one PUT below cfg->multipart_threshold, else a
 * multipart upload (aborted again on failure). */
int s3_put_file(struct s3_client *c, const char *key, const char *path,
                const struct s3_put_opts *opts);
int s3_put_buffer(struct s3_client *c, const char *key, const void *data, size_t len,
                  const struct s3_put_opts *opts);
int s3_get_object(struct s3_client *c, const char *key, struct d9_buf *out);
/* The object's first BYTES bytes (all of it when it is shorter). */
int s3_get_object_head(struct s3_client *c, const char *key, uint64_t bytes, struct d9_buf *out);
/* -ENOENT when the object does not exist. */
int s3_head_object(struct s3_client *c, const char *key, uint64_t *size);
/* Value of the object's x-amz-meta-<name>; -ENODATA when it has none. */
int s3_head_object_meta(struct s3_client *c, const char *key, const char *name, char *value,
                        size_t size);
int s3_delete_object(struct s3_client *c, const char *key);
int s3_create_bucket(struct s3_client *c);

struct s3_object {
        char *key;
        uint64_t size;
        char *last_modified;    /* ISO 8601 as the server sent it */
};

struct s3_listing {
        struct s3_object *objects;
        size_t n_objects;
        char **prefixes;        /* CommonPrefixes when a delimiter was given */
        size_t n_prefixes;
};

/* ListObjectsV2 over all pages (at most max_keys objects; 0 = no limit). */
int s3_list(struct s3_client *c, const char *prefix, const char *delimiter, size_t max_keys,
            struct s3_listing *out);
void s3_listing_free(struct s3_listing *l);

/* ---- dial9 object keys ------------------------------------------------ */

/* {prefix/}{YYYY-MM-DD}/{HHMM}/{service}/{instance}/{boot_id}/{epoch}-{index}{ext}
 * with the UTC minute of start_epoch_s; ext e.g. ".bin.gz". Returns the
 * key's length, or -ENAMETOOLONG / -EINVAL (empty component). */
int s3_dial9_key(char *out, size_t size, const char *prefix, int64_t start_epoch_s,
                 const char *service, const char *instance, const char *boot_id,
                 uint64_t index, const char *ext);
/* dial9's boot id: four lowercase letters derived from seed, "-", pid. */
void s3_dial9_boot_id(char out[32], uint64_t seed, int pid);
