/* AWS Signature Version 4 for S3 requests.
 *
 * We sign by hand instead of using CURLOPT_AWS_SIGV4: Debian 12's curl 7.88
 * leaves x-amz-content-sha256 and query canonicalisation to the caller
 * anyway, and signing every header ourselves gives the same bytes on any curl.
 * HMAC-SHA256 comes from OpenSSL's libcrypto. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon/ship/s3/s3_int.h"

static void hex(const uint8_t *in, size_t n, char *out)
{
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = digits[in[i] >> 4];
                out[2 * i + 1] = digits[in[i] & 15];
        }
        out[2 * n] = 0;
}

void s3_sha256_hex(const void *data, size_t len, char out[65])
{
        uint8_t md[SHA256_DIGEST_LENGTH];
        SHA256(data, len, md);
        hex(md, sizeof md, out);
}

static void hmac_sha256(const void *key, size_t key_len, const char *msg, uint8_t out[32])
{
        unsigned out_len = 32;
        HMAC(EVP_sha256(), key, (int)key_len, (const uint8_t *)msg, strlen(msg), out, &out_len);
}

void sigv4_signing_key(const char *secret, const char *date8, const char *region,
                       const char *service, uint8_t out[32])
{
        char k_secret[256];
        uint8_t k[32];
        snprintf(k_secret, sizeof k_secret, "AWS4%s", secret);
        hmac_sha256(k_secret, strlen(k_secret), date8, k);
        explicit_bzero(k_secret, sizeof k_secret);
        hmac_sha256(k, 32, region, k);
        hmac_sha256(k, 32, service, k);
        hmac_sha256(k, 32, "aws4_request", out);
        explicit_bzero(k, sizeof k);
}

void sigv4_amz_date(time_t t, char out[17])
{
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

int s3_uri_encode(const char *in, int keep_slash, char *out, size_t size)
{
        static const char digits[] = "0123456789ABCDEF";
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
                int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                            (*p >= '0' && *p <= '9') || strchr("-._~", *p) ||
                            (keep_slash && *p == '/');
                if (o + 4 > size)
                        return -ENAMETOOLONG;
                if (plain) {
                        out[o++] = (char)*p;
                } else {
                        out[o++] = '%';
                        out[o++] = digits[*p >> 4];
                        out[o++] = digits[*p & 15];
                }
        }
        out[o] = 0;
        return (int)o;
}

/* Appends with bounds checking; returns -1 once the buffer is full. */
static int cat(char *buf, size_t size, size_t *len, const char *s)
{
        size_t n = strlen(s);
        if (*len + n + 1 > size)
                return -1;
        memcpy(buf + *len, s, n + 1);
        *len += n;
        return 0;
}

static int canonical_request(const struct sigv4_input *in, char *out, size_t size,
                             char *signed_headers, size_t sh_size)
{
        size_t len = 0, sh_len = 0;
        int bad = cat(out, size, &len, in->method) | cat(out, size, &len, "\n") |
                  cat(out, size, &len, in->canonical_uri) | cat(out, size, &len, "\n") |
                  cat(out, size, &len, in->canonical_query) | cat(out, size, &len, "\n");
        signed_headers[0] = 0;
        for (size_t i = 0; i < in->n_headers; i++) {
                bad |= cat(out, size, &len, in->headers[i].name) | cat(out, size, &len, ":") |
                       cat(out, size, &len, in->headers[i].value) | cat(out, size, &len, "\n");
                bad |= cat(signed_headers, sh_size, &sh_len, i ? ";" : "") |
                       cat(signed_headers, sh_size, &sh_len, in->headers[i].name);
        }
        bad |= cat(out, size, &len, "\n") | cat(out, size, &len, signed_headers) |
               cat(out, size, &len, "\n") | cat(out, size, &len, in->payload_sha256);
        return bad ? -ENAMETOOLONG : 0;
}

int sigv4_authorization(const struct sigv4_input *in, char *out, size_t size)
{
        char creq[16384], signed_headers[2048], creq_hash[65], scope[128], to_sign[512];
        char date8[9], sig_hex[65];
        uint8_t key[32], sig[32];
        int r = canonical_request(in, creq, sizeof creq, signed_headers, sizeof signed_headers);
        if (r < 0)
                return r;
        s3_sha256_hex(creq, strlen(creq), creq_hash);
        memcpy(date8, in->amz_date, 8);
        date8[8] = 0;
        snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", date8, in->region, in->service);
        snprintf(to_sign, sizeof to_sign, "AWS4-HMAC-SHA256\n%s\n%s\n%s", in->amz_date, scope,
                 creq_hash);
        sigv4_signing_key(in->secret_key, date8, in->region, in->service, key);
        hmac_sha256(key, sizeof key, to_sign, sig);
        explicit_bzero(key, sizeof key);
        hex(sig, sizeof sig, sig_hex);
        r = snprintf(out, size, "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                     in->access_key, scope, signed_headers, sig_hex);
        return r < 0 || (size_t)r >= size ? -ENAMETOOLONG : r;
}
