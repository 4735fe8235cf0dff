/* Internals of d9s3 shared by its files and its tests; not for other components. */
#pragma once

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/ship/s3/s3.h"

#define S3_ERR_MAX 512

/* ---- sigv4.c: AWS Signature Version 4 --------------------------------- */

struct sigv4_header {
        const char *name;       /* lower case */
        const char *value;      /* trimmed */
};

struct sigv4_input {
        const char *method;
        const char *canonical_uri;      /* already URI-encoded */
        const char *canonical_query;    /* sorted, encoded, "" if none */
        const struct sigv4_header *headers; /* sorted by name, all of them signed */
        size_t n_headers;
        const char *payload_sha256;     /* hex */
        const char *amz_date;           /* YYYYMMDD'T'HHMMSS'Z' */
        const char *region;
        const char *service;
        const char *access_key;
        const char *secret_key;
};

void s3_sha256_hex(const void *data, size_t len, char out[65]);
/* kSigning = HMAC chain over date, region, service, "aws4_request". */
void sigv4_signing_key(const char *secret, const char *date8, const char *region,
                       const char *service, uint8_t out[32]);
/* Writes the Authorization header value; returns its length or -ENAMETOOLONG. */
int sigv4_authorization(const struct sigv4_input *in, char *out, size_t size);
/* RFC 3986 encoding as SigV4 wants it: unreserved kept, '/' kept if keep_slash. */
int s3_uri_encode(const char *in, int keep_slash, char *out, size_t size);
void sigv4_amz_date(time_t t, char out[17]);

/* ---- request.c: one signed HTTP exchange ------------------------------ */

struct s3_query {
        const char *name;
        const char *value;      /* NULL = bare name ("?uploads") */
};

struct s3_request {
        const char *method;
        const char *key;                /* NULL = the bucket itself */
        const struct s3_query *query;   /* any order; sorted when signing */
        size_t n_query;
        const void *body;
        size_t body_len;
        const char *content_type;
        const char *range;              /* Range header value, e.g. "bytes=0-16383" */
        const struct s3_meta *meta;
        size_t n_meta;
        struct d9_buf *response;        /* body sink; may be NULL */
        char *etag;                     /* out: ETag header, if etag_size */
        size_t etag_size;
        uint64_t *content_length;       /* out: Content-Length, if not NULL */
        const char *want_meta;          /* out: value of x-amz-meta-<want_meta> ... */
        char *meta_value;               /* ... into meta_value[meta_size] */
        size_t meta_size;
};

struct s3_client {
        struct s3_config cfg;
        CURL *curl;
        const volatile bool *cancel;
        long last_status;
        char last_error[S3_ERR_MAX];
        char host[256];                 /* host[:port] of the endpoint */
        char scheme[8];
        int path_style;
};

/* Returns 0 for a 2xx answer; else a negative errno (-EACCES for 401/403,
 * -ENOENT for 404, -EIO for other HTTP errors, -ECONNREFUSED/-ETIMEDOUT/
 * -ECANCELED for transport failures) with c->last_error set. */
int s3_request_run(struct s3_client *c, const struct s3_request *r);
void s3_set_error(struct s3_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- xml.c: the few S3 response elements we read ---------------------- */

/* Copies the decoded text of the first <tag>...</tag> at or after *pos into a
 * new string and advances *pos past it; NULL when there is none. */
char *s3_xml_next(const char *doc, const char **pos, const char *tag);
/* Escape &, <, >, ", ' for XML text. Caller frees. */
char *s3_xml_escape(const char *s);

/* ---- multipart.c ------------------------------------------------------ */

int s3_put_multipart(struct s3_client *c, const char *key, int fd, uint64_t size,
                     const struct s3_put_opts *opts);
