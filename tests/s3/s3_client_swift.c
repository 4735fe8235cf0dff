/* d9s3 against a real S3 implementation (Swift + s3api, which verifies SigV4
 * and payload hashes): PUT/GET/HEAD/LIST/DELETE round trips byte-identical,
 * metadata arrives, multipart upload works, a wrong secret is a clear error.
 * argv[1] = a real dial9 trace (the demo fixture). Run under swift-harness
 * with --bucket d9-client. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "s3env.h"

#define BUCKET "d9-client"

static void put_get_roundtrip(struct s3_client *c, const char *fixture)
{
        size_t len;
        uint8_t *data = read_file(fixture, &len);
        if (!data)
                bail("cannot read %s", fixture);
        struct s3_meta meta[] = { { "service", "demo" }, { "segment-index", "0" } };
        struct s3_put_opts opts = { .content_type = "application/gzip", .meta = meta, .n_meta = 2 };
        const char *key = "t/2026-01-02/0304/demo/host a+b/abcd-1/1767322800-0.bin.gz";
        int err = s3_put_file(c, key, fixture, &opts);
        ok(err == 0, "PUT of the %zu-byte fixture under a key with space and '+' (%s)", len,
           s3_client_last_error(c));
        struct d9_buf got = { 0 };
        err = s3_get_object(c, key, &got);
        ok(err == 0 && got.len == len && !memcmp(got.data, data, len),
           "GET returns the same %zu bytes (err %d, got %zu)", len, err, got.len);
        uint64_t size = 0;
        ok(s3_head_object(c, key, &size) == 0 && size == len, "HEAD reports size %llu",
           (unsigned long long)size);
        d9_buf_free(&got);
        free(data);
}

static void list_with_prefix_and_delimiter(struct s3_client *c)
{
        ok(s3_put_buffer(c, "t/2026-01-02/0305/other/x/y/1-1.bin", "abc", 3, NULL) == 0,
           "second object PUT");
        struct s3_listing l;
        int err = s3_list(c, "t/2026-01-02/", "/", 0, &l);
        ok(err == 0 && l.n_prefixes == 2 && l.n_objects == 0, "LIST with delimiter: 2 prefixes, 0 objects");
        if (err == 0 && l.n_prefixes == 2)
                ok(!strcmp(l.prefixes[0], "t/2026-01-02/0304/") && !strcmp(l.prefixes[1], "t/2026-01-02/0305/"),
                   "common prefixes are the minute buckets (%s, %s)", l.prefixes[0], l.prefixes[1]);
        s3_listing_free(&l);
        err = s3_list(c, "t/", NULL, 0, &l);
        ok(err == 0 && l.n_objects == 2, "LIST without delimiter finds both objects (%zu)", l.n_objects);
        if (err == 0 && l.n_objects == 2)
                ok(!strcmp(l.objects[0].key, "t/2026-01-02/0304/demo/host a+b/abcd-1/1767322800-0.bin.gz") &&
                   l.objects[1].size == 3, "listed key decoded, size right");
        s3_listing_free(&l);
}

/* 5 objects, 2 keys per page: three requests chained by continuation tokens. */
static void list_pages(const struct s3_config *base)
{
        struct s3_config cfg = *base;
        cfg.list_page_size = 2;
        struct s3_client *c;
        char key[64];
        if (s3_client_new(&cfg, &c) < 0)
                bail("client");
        int put = 0;
        for (int i = 0; i < 5; i++) {
                snprintf(key, sizeof key, "pages/%d & <%d>.bin", i, i);
                put += s3_put_buffer(c, key, key, strlen(key), NULL) == 0;
        }
        struct s3_listing l;
        int err = s3_list(c, "pages/", NULL, 0, &l);
        ok(put == 5 && err == 0 && l.n_objects == 5, "LIST over 3 pages finds all 5 objects (%zu)", l.n_objects);
        if (err == 0 && l.n_objects == 5)
                ok(!strcmp(l.objects[4].key, "pages/4 & <4>.bin"), "XML entities decoded: %s", l.objects[4].key);
        s3_listing_free(&l);
        err = s3_list(c, "pages/", NULL, 2, &l);
        ok(err == 0 && l.n_objects == 2, "the server honours 2 keys per page, so the above took pages (%zu)",
           l.n_objects);
        s3_listing_free(&l);
        s3_client_free(c);
}

static void delete_removes(struct s3_client *c)
{
        ok(s3_delete_object(c, "t/2026-01-02/0305/other/x/y/1-1.bin") == 0, "DELETE succeeds");
        ok(s3_head_object(c, "t/2026-01-02/0305/other/x/y/1-1.bin", NULL) == -ENOENT,
           "HEAD after DELETE is -ENOENT");
}

/* 5 MiB parts (s3api enforces S3's minimum), 11 MiB file -> 3 parts. */
static void multipart(const struct s3_config *base, const char *fixture)
{
        struct s3_config cfg = *base;
        cfg.multipart_threshold = 6 << 20;
        cfg.part_size = S3_MIN_PART_SIZE;
        struct s3_client *c;
        if (s3_client_new(&cfg, &c) < 0)
                bail("client");
        size_t flen, len = 11 << 20;
        uint8_t *seed = read_file(fixture, &flen), *data = malloc(len);
        for (size_t off = 0; off < len; off += flen) /* real trace bytes, repeated */
                memcpy(data + off, seed, len - off < flen ? len - off : flen);
        char path[] = "/tmp/d9-s3-mp.XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0 || write(fd, data, len) != (ssize_t)len)
                bail("temp file");
        close(fd);
        int err = s3_put_file(c, "mp/big.bin", path, NULL);
        ok(err == 0, "multipart upload of 11 MiB in 5 MiB parts (%s)", s3_client_last_error(c));
        struct d9_buf got = { 0 };
        err = s3_get_object(c, "mp/big.bin", &got);
        ok(err == 0 && got.len == len && !memcmp(got.data, data, len),
           "multipart object downloads byte-identical (%zu bytes)", got.len);
        d9_buf_free(&got);
        unlink(path);
        free(seed);
        free(data);
        s3_client_free(c);
}

static void wrong_secret(const struct s3_config *base)
{
        struct s3_config cfg = *base;
        cfg.secret_key = "not-the-secret";
        struct s3_client *c;
        if (s3_client_new(&cfg, &c) < 0)
                bail("client");
        int err = s3_put_buffer(c, "nope.bin", "x", 1, NULL);
        const char *msg = s3_client_last_error(c);
        ok(err == -EACCES, "PUT with a wrong secret fails with -EACCES (%d)", err);
        ok(strstr(msg, "403") && strstr(msg, "SignatureDoesNotMatch") && !strstr(msg, "not-the-secret"),
           "error says HTTP 403 SignatureDoesNotMatch, without the secret: %s", msg);
        s3_client_free(c);
}

int main(int argc, char **argv)
{
        struct s3_config cfg;
        struct s3_client *c;
        if (argc < 2)
                bail("usage: %s FIXTURE", argv[0]);
        s3env_config(&cfg, BUCKET);
        if (s3_client_new(&cfg, &c) < 0)
                bail("s3_client_new failed");
        put_get_roundtrip(c, argv[1]);
        list_with_prefix_and_delimiter(c);
        delete_removes(c);
        list_pages(&cfg);
        multipart(&cfg, argv[1]);
        wrong_secret(&cfg);
        s3_client_free(c);
        s3_config_free(&cfg);
        return tap_done();
}
