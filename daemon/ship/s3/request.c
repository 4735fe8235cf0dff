/* One signed S3 request over libcurl: URL and canonical form, headers, the
 * exchange itself, and turning failures into an errno plus one clear line. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "daemon/ship/s3/s3_int.h"

#define MAX_HEADERS 32
#define MAX_QUERY 8

void s3_set_error(struct s3_client *c, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
        va_end(ap);
}

static size_t on_body(char *ptr, size_t size, size_t n, void *userdata)
{
        return d9_buf_append(userdata, ptr, size * n) < 0 ? 0 : size * n;
}

static size_t on_header(char *line, size_t size, size_t n, void *userdata)
{
        const struct s3_request *r = userdata;
        size_t len = size * n;
        char buf[512];
        if (len >= sizeof buf)
                return len;
        memcpy(buf, line, len);
        buf[len] = 0;
        buf[strcspn(buf, "\r\n")] = 0;
        if (r->etag_size && !strncasecmp(buf, "etag:", 5)) {
                const char *v = buf + 5 + strspn(buf + 5, " ");
                snprintf(r->etag, r->etag_size, "%s", v);
        } else if (r->content_length && !strncasecmp(buf, "content-length:", 15)) {
                *r->content_length = strtoull(buf + 15, NULL, 10);
        } else if (r->want_meta && !strncasecmp(buf, "x-amz-meta-", 11)) {
                size_t name_len = strlen(r->want_meta);
                const char *v = buf + 12 + name_len;
                if (!strncasecmp(buf + 11, r->want_meta, name_len) && buf[11 + name_len] == ':')
                        snprintf(r->meta_value, r->meta_size, "%s", v + strspn(v, " "));
        }
        return len;
}

static int on_progress(void *userdata, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
        const struct s3_client *c = userdata;
        return c->cancel && *c->cancel;
}

static int cmp_query(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "name=value&..." sorted by encoded name then value, as SigV4 and the URL
 * both use it. */
static int canonical_query(const struct s3_request *r, char *out, size_t size)
{
        char items[MAX_QUERY][2200], *sorted[MAX_QUERY];
        size_t len = 0;
        if (r->n_query > MAX_QUERY)
                return -E2BIG;
        for (size_t i = 0; i < r->n_query; i++) {
                char name[128], value[2048]; /* continuation tokens are opaque and long */
                if (s3_uri_encode(r->query[i].name, 0, name, sizeof name) < 0 ||
                    s3_uri_encode(r->query[i].value ? r->query[i].value : "", 0, value,
                                  sizeof value) < 0)
                        return -ENAMETOOLONG;
                snprintf(items[i], sizeof items[i], "%s=%s", name, value);
                sorted[i] = items[i];
        }
        qsort(sorted, r->n_query, sizeof sorted[0], cmp_query);
        out[0] = 0;
        for (size_t i = 0; i < r->n_query; i++) {
                int n = snprintf(out + len, size - len, "%s%s", i ? "&" : "", sorted[i]);
                if (n < 0 || (size_t)n >= size - len)
                        return -ENAMETOOLONG;
                len += (size_t)n;
        }
        return 0;
}

static int cmp_header(const void *a, const void *b)
{
        return strcmp(((const struct sigv4_header *)a)->name, ((const struct sigv4_header *)b)->name);
}

/* Every header we send is signed; names are lower case as SigV4 requires. */
static int collect_headers(const struct s3_client *c, const struct s3_request *r,
                           const char *host, const char *payload_hash, const char *amz_date,
                           struct sigv4_header *h, char meta_names[][160])
{
        size_t n = 0;
        h[n++] = (struct sigv4_header){ "host", host };
        h[n++] = (struct sigv4_header){ "x-amz-content-sha256", payload_hash };
        h[n++] = (struct sigv4_header){ "x-amz-date", amz_date };
        if (c->cfg.session_token && *c->cfg.session_token)
                h[n++] = (struct sigv4_header){ "x-amz-security-token", c->cfg.session_token };
        if (r->content_type)
                h[n++] = (struct sigv4_header){ "content-type", r->content_type };
        if (r->range)
                h[n++] = (struct sigv4_header){ "range", r->range };
        for (size_t i = 0; i < r->n_meta; i++) {
                if (n >= MAX_HEADERS)
                        return -E2BIG;
                snprintf(meta_names[i], 160, "x-amz-meta-%s", r->meta[i].name);
                h[n++] = (struct sigv4_header){ meta_names[i], r->meta[i].value };
        }
        qsort(h, n, sizeof h[0], cmp_header);
        return (int)n;
}

static int build_paths(const struct s3_client *c, const struct s3_request *r, char *uri,
                       size_t uri_size, char *host, size_t host_size)
{
        char key_enc[3 * 1024 + 1] = "";
        if (r->key && s3_uri_encode(r->key, 1, key_enc, sizeof key_enc) < 0)
                return -ENAMETOOLONG;
        int n;
        if (c->path_style) {
                snprintf(host, host_size, "%s", c->host);
                n = r->key ? snprintf(uri, uri_size, "/%s/%s", c->cfg.bucket, key_enc)
                           : snprintf(uri, uri_size, "/%s", c->cfg.bucket);
        } else {
                snprintf(host, host_size, "%s.%s", c->cfg.bucket, c->host);
                n = snprintf(uri, uri_size, "/%s", key_enc);
        }
        return n < 0 || (size_t)n >= uri_size ? -ENAMETOOLONG : 0;
}

static int map_curl_error(struct s3_client *c, const struct s3_request *r, CURLcode cc,
                          const char *errbuf)
{
        s3_set_error(c, "%s %s: %s", r->method, r->key ? r->key : c->cfg.bucket,
                     *errbuf ? errbuf : curl_easy_strerror(cc));
        switch (cc) {
        case CURLE_COULDNT_CONNECT: return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST: return -EHOSTUNREACH;
        case CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
        case CURLE_ABORTED_BY_CALLBACK: return -ECANCELED;
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE: return -ECONNRESET;
        default: return -EIO;
        }
}

static int map_http_error(struct s3_client *c, const struct s3_request *r, long status,
                          const struct d9_buf *body)
{
        const char *doc = body && body->data ? (const char *)body->data : "";
        const char *pos = doc;
        char *code = s3_xml_next(doc, &pos, "Code");
        pos = doc;
        char *msg = s3_xml_next(doc, &pos, "Message");
        s3_set_error(c, "%s %s/%s: HTTP %ld %s%s%s", r->method, c->cfg.bucket,
                     r->key ? r->key : "", status, code ? code : "", msg ? ": " : "",
                     msg ? msg : "");
        free(code);
        free(msg);
        if (status == 401 || status == 403)
                return -EACCES;
        if (status == 404)
                return -ENOENT;
        return -EIO;
}

static struct curl_slist *header_list(const struct sigv4_header *h, int n, const char *auth)
{
        struct curl_slist *list = NULL, *tmp;
        char line[8192];
        for (int i = 0; i <= n; i++) {
                int len = i < n ? snprintf(line, sizeof line, "%s: %s", h[i].name, h[i].value)
                                : snprintf(line, sizeof line, "Authorization: %s", auth);
                if (len < 0 || (size_t)len >= sizeof line || !(tmp = curl_slist_append(list, line)))
                        goto fail;
                list = tmp;
        }
        /* No "Expect: 100-continue" round trip, and no unsigned defaults. */
        if ((tmp = curl_slist_append(list, "Expect:")))
                return tmp;
fail:
        curl_slist_free_all(list);
        return NULL;
}

static void set_method(CURL *h, const struct s3_request *r)
{
        if (!strcmp(r->method, "HEAD"))
                curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        else if (!strcmp(r->method, "GET"))
                curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        else
                curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
        if (r->body || !strcmp(r->method, "PUT") || !strcmp(r->method, "POST")) {
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : "");
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
        }
}

static int perform(struct s3_client *c, const struct s3_request *r, const char *url,
                   struct curl_slist *headers, struct d9_buf *body)
{
        CURL *h = c->curl;
        char errbuf[CURL_ERROR_SIZE] = "";
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, c->cfg.timeout_s);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
        if (c->cfg.max_upload_rate) /* keeps shipping from starving the traced service's traffic */
                curl_easy_setopt(h, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)c->cfg.max_upload_rate);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, (void *)r);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
        set_method(h, r);
        CURLcode cc = curl_easy_perform(h);
        if (cc != CURLE_OK)
                return map_curl_error(c, r, cc, errbuf);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->last_status);
        if (c->last_status < 200 || c->last_status > 299)
                return map_http_error(c, r, c->last_status, body);
        return 0;
}

int s3_request_run(struct s3_client *c, const struct s3_request *r)
{
        char uri[4096], host[512], query[MAX_QUERY * 2200], payload_hash[65], amz_date[17], auth[4096];
        char url[4096 + 512 + MAX_QUERY * 2200 + 16], meta_names[MAX_HEADERS][160];
        struct sigv4_header h[MAX_HEADERS];
        struct d9_buf scratch = { 0 };
        c->last_status = 0;
        c->last_error[0] = 0;
        int n, err = build_paths(c, r, uri, sizeof uri, host, sizeof host);
        if (err == 0)
                err = canonical_query(r, query, sizeof query);
        if (err < 0) {
                s3_set_error(c, "%s %s: key or query too long", r->method, r->key ? r->key : "");
                return err;
        }
        s3_sha256_hex(r->body ? r->body : "", r->body_len, payload_hash);
        sigv4_amz_date(time(NULL), amz_date);
        n = collect_headers(c, r, host, payload_hash, amz_date, h, meta_names);
        if (n < 0)
                return n;
        struct sigv4_input in = {
                .method = r->method, .canonical_uri = uri, .canonical_query = query,
                .headers = h, .n_headers = (size_t)n, .payload_sha256 = payload_hash,
                .amz_date = amz_date, .region = c->cfg.region, .service = "s3",
                .access_key = c->cfg.access_key, .secret_key = c->cfg.secret_key,
        };
        if ((err = sigv4_authorization(&in, auth, sizeof auth)) < 0)
                return err;
        snprintf(url, sizeof url, "%s://%s%s%s%s", c->scheme, host, uri, *query ? "?" : "", query);
        struct curl_slist *headers = header_list(h, n, auth);
        if (!headers)
                return -ENOMEM;
        err = perform(c, r, url, headers, r->response ? r->response : &scratch);
        curl_slist_free_all(headers);
        explicit_bzero(auth, sizeof auth);
        d9_buf_free(&scratch);
        return err;
}
