/* The shipper against real Swift + s3api: segments of a real recording land
 * under dial9 keys and download byte-identical; a wrong secret keeps them
 * (and a restarted shipper with the right secret resumes them); the proxy
 * stopped mid-run loses and duplicates nothing; a segment evicted while the
 * store is down is counted; delete-after-upload removes local copies only
 * after upload. argv: FIXTURE(.bin.gz) HARNESS. Env from swift-harness run
 * --bucket d9-ship. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/ship/ship.h"
#include "s3env.h"

#define BUCKET "d9-ship"
#define START_NS 1767322800123456789ll /* 2026-01-02 03:00:00.123 UTC */

static const char *fixture, *harness;
static char work[64];

static void sh(const char *fmt, const char *arg)
{
        char cmd[1024];
        snprintf(cmd, sizeof cmd, fmt, arg, arg);
        if (system(cmd) != 0)
                bail("command failed: %s", cmd);
}

static void harness_cmd(const char *what)
{
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s %s %s", harness, what, getenv("D9_SWIFT_DIR"));
        if (system(cmd) != 0)
                bail("%s failed", cmd);
}

/* A fresh spool dir with n copies of the recording: trace.<i>.bin.gz. */
static void make_segments(const char *dir, int n)
{
        char path[256];
        sh("mkdir -p %s", dir);
        for (int i = 0; i < n; i++) {
                snprintf(path, sizeof path, "cp %%s %s/trace.%d.bin.gz", dir, i);
                sh(path, fixture);
        }
}

static void shipper_config(struct ship_config *cfg, const char *state, const char *prefix)
{
        d9d_ship_config_init(cfg);
        s3env_config(&cfg->s3, BUCKET);
        cfg->s3.prefix = strdup(prefix);
        cfg->s3.instance = strdup("test-host");
        cfg->state_dir = strdup(state);
        cfg->retry_base_ms = 100;
        cfg->retry_max_ms = 400;
        cfg->breaker_threshold = 4;
        cfg->breaker_cooldown_ms = 500;
}

static struct segment_meta meta_for(uint64_t index)
{
        return (struct segment_meta){ .service = "demo", .boot_id = "abcd-4242", .pid = 4242,
                                      .index = index, .start_realtime_ns = START_NS + (int64_t)index * 60000000000ll };
}

static int count_jobs(const char *state)
{
        char cmd[256];
        snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -c '\\.job$'", state);
        FILE *p = popen(cmd, "r");
        int n = -1;
        if (p && fscanf(p, "%d", &n) != 1)
                n = -1;
        if (p)
                pclose(p);
        return n;
}

/* The object equals the local file byte for byte. */
static int object_matches(struct s3_client *c, const char *key, const char *path)
{
        size_t len;
        uint8_t *want = read_file(path, &len);
        struct d9_buf got = { 0 };
        int same = want && s3_get_object(c, key, &got) == 0 && got.len == len && !memcmp(got.data, want, len);
        d9_buf_free(&got);
        free(want);
        return same;
}

static size_t count_objects(struct s3_client *c, const char *prefix)
{
        struct s3_listing l;
        if (s3_list(c, prefix, NULL, 0, &l) < 0)
                return (size_t)-1;
        size_t n = l.n_objects;
        s3_listing_free(&l);
        return n;
}

static void wait_for(struct shipper *s, int (*cond)(const struct ship_stats *),
                     const char *what)
{
        struct ship_stats st;
        for (int i = 0; i < 600; i++) {
                shipper_stats(s, &st);
                if (cond(&st))
                        return;
                usleep(50000);
        }
        bail("timed out waiting for %s", what);
}

static int one_ok(const struct ship_stats *st) { return st->uploads_ok >= 1; }
static int two_failed(const struct ship_stats *st) { return st->uploads_failed >= 2; }
static int one_failed(const struct ship_stats *st) { return st->uploads_failed >= 1; }

static void segments_land_under_dial9_keys(struct s3_client *c)
{
        char dir[128], state[128], raw[160];
        struct ship_config cfg;
        struct shipper *s;
        snprintf(dir, sizeof dir, "%s/basic", work);
        snprintf(state, sizeof state, "%s/basic-state", work);
        make_segments(dir, 2);
        /* A third, uncompressed segment of 4 MB goes multipart (threshold 2 MiB). */
        snprintf(raw, sizeof raw, "%s/trace.2.bin", dir);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "gzip -dc %s > %s", fixture, raw);
        if (system(cmd) != 0)
                bail("gunzip");
        shipper_config(&cfg, state, "fleet/a");
        cfg.s3.multipart_threshold = 2 << 20;
        cfg.s3.part_size = S3_MIN_PART_SIZE;
        if (shipper_start(&cfg, &s) < 0)
                bail("shipper_start");
        char paths[3][200];
        for (int i = 0; i < 3; i++) {
                snprintf(paths[i], sizeof paths[i], i < 2 ? "%s/trace.%d.bin.gz" : "%s/trace.%d.bin", dir, i);
                struct segment_meta m = meta_for((uint64_t)i);
                ok(shipper_enqueue(s, paths[i], &m) == 0, "enqueue %s", paths[i]);
        }
        ok(shipper_flush(s, 60000) == 0, "queue drains");
        struct ship_stats st;
        shipper_stats(s, &st);
        ok(st.uploads_ok == 3 && st.uploads_failed == 0 && st.queue_len == 0,
           "3 uploads ok, 0 failed (last error: %s)", st.last_error);
        shipper_stop(s);
        static const char *keys[3] = {
                "fleet/a/2026-01-02/0300/demo/test-host/abcd-4242/1767322800-0.bin.gz",
                "fleet/a/2026-01-02/0301/demo/test-host/abcd-4242/1767322860-1.bin.gz",
                "fleet/a/2026-01-02/0302/demo/test-host/abcd-4242/1767322920-2.bin",
        };
        uint64_t bytes = 0;
        for (int i = 0; i < 3; i++) {
                struct stat sb;
                ok(object_matches(c, keys[i], paths[i]), "%s downloads byte-identical", keys[i]);
                ok(stat(paths[i], &sb) == 0, "local %s kept (no delete_after_upload)", paths[i]);
                bytes += (uint64_t)sb.st_size;
        }
        static const char *const want[][2] = {
                { "service", "demo" }, { "host", "test-host" }, { "pid", "4242" },
                { "boot-id", "abcd-4242" }, { "segment-index", "1" }, { "start-time", "1767322860" },
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                char v[128];
                int r = s3_head_object_meta(c, keys[1], want[i][0], v, sizeof v);
                ok(r == 0 && !strcmp(v, want[i][1]), "object metadata %s = %s (got %s)", want[i][0],
                   want[i][1], r == 0 ? v : "nothing");
        }
        ok(st.bytes_shipped == bytes, "bytes_shipped = %llu", (unsigned long long)st.bytes_shipped);
        ok(count_objects(c, "fleet/a/") == 3, "exactly 3 objects under fleet/a/");
        ok(count_jobs(state) == 0, "no pending jobs left");
        d9d_ship_config_free(&cfg);
}

static void wrong_secret_keeps_then_restart_resumes(struct s3_client *c)
{
        char dir[128], state[128], path[200];
        struct ship_config cfg;
        struct shipper *s;
        snprintf(dir, sizeof dir, "%s/auth", work);
        snprintf(state, sizeof state, "%s/auth-state", work);
        make_segments(dir, 2);
        shipper_config(&cfg, state, "fleet/b");
        free(cfg.s3.secret_key);
        cfg.s3.secret_key = strdup("wrong-secret");
        cfg.breaker_threshold = 2;
        cfg.breaker_cooldown_ms = 60000;
        if (shipper_start(&cfg, &s) < 0)
                bail("shipper_start");
        for (int i = 0; i < 2; i++) {
                snprintf(path, sizeof path, "%s/trace.%d.bin.gz", dir, i);
                struct segment_meta m = meta_for((uint64_t)i);
                shipper_enqueue(s, path, &m);
        }
        wait_for(s, two_failed, "two failed uploads");
        struct ship_stats st;
        shipper_stats(s, &st);
        ok(st.breaker_open, "breaker opens after 2 failures in a row");
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        shipper_stop(s);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double stop_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        ok(stop_s < 5, "shipper_stop does not sit out the 60 s breaker cooldown (%.2f s)", stop_s);
        ok(strstr(st.last_error, "403") && strstr(st.last_error, "SignatureDoesNotMatch") &&
           !strstr(st.last_error, "wrong-secret"),
           "wrong secret: clear error without the secret: %s", st.last_error);
        ok(st.uploads_ok == 0 && st.queue_len == 2, "nothing uploaded, 2 still queued");
        ok(count_jobs(state) == 2 && access(path, F_OK) == 0, "segments and their jobs kept locally");
        ok(count_objects(c, "fleet/b/") == 0, "nothing in the bucket");

        /* Restart with the right secret and no new enqueue: the jobs resume. */
        free(cfg.s3.secret_key);
        cfg.s3.secret_key = strdup(getenv("D9_S3_SECRET_KEY"));
        if (shipper_start(&cfg, &s) < 0)
                bail("shipper_start");
        ok(shipper_flush(s, 60000) == 0, "restarted shipper drains the pending jobs");
        shipper_stats(s, &st);
        shipper_stop(s);
        ok(st.uploads_ok == 2, "2 resumed uploads ok (%llu)", (unsigned long long)st.uploads_ok);
        ok(object_matches(c, "fleet/b/2026-01-02/0301/demo/test-host/abcd-4242/1767322860-1.bin.gz", path),
           "resumed segment downloads byte-identical");
        ok(count_objects(c, "fleet/b/") == 2 && count_jobs(state) == 0, "2 objects, no jobs left");
        d9d_ship_config_free(&cfg);
}

/* Proxy killed after the first upload: in-flight and later uploads fail, the
 * breaker opens, and once the proxy is back every segment lands exactly once.
 * One segment is deleted while the store is down, as the disk budget would. */
static void outage_loses_and_duplicates_nothing(struct s3_client *c)
{
        enum { N = 6 };
        char dir[128], state[128], paths[N][200];
        struct ship_config cfg;
        struct shipper *s;
        snprintf(dir, sizeof dir, "%s/outage", work);
        snprintf(state, sizeof state, "%s/outage-state", work);
        make_segments(dir, N);
        shipper_config(&cfg, state, "fleet/c");
        if (shipper_start(&cfg, &s) < 0)
                bail("shipper_start");
        for (int i = 0; i < N; i++) {
                snprintf(paths[i], sizeof paths[i], "%s/trace.%d.bin.gz", dir, i);
                struct segment_meta m = meta_for((uint64_t)i);
                shipper_enqueue(s, paths[i], &m);
        }
        wait_for(s, one_ok, "the first upload");
        harness_cmd("proxy-stop");
        wait_for(s, one_failed, "a failed upload while the proxy is down");
        struct ship_stats st;
        shipper_stats(s, &st);
        ok(st.uploads_ok < N, "store down before all uploads finished (%llu ok)",
           (unsigned long long)st.uploads_ok);
        ok(unlink(paths[N - 1]) == 0, "segment %d evicted while the store is down", N - 1);
        usleep(1500000); /* long enough for the breaker to open */
        shipper_stats(s, &st);
        ok(st.breaker_open && *st.last_error, "breaker open, last error: %s", st.last_error);
        harness_cmd("proxy-start");
        ok(shipper_flush(s, 90000) == 0, "queue drains after the proxy is back");
        shipper_stats(s, &st);
        shipper_stop(s);
        ok(st.uploads_ok == N - 1 && st.segments_lost == 1 && !st.breaker_open,
           "%d uploads ok, 1 counted lost to eviction, breaker closed (ok %llu, lost %llu)", N - 1,
           (unsigned long long)st.uploads_ok, (unsigned long long)st.segments_lost);
        ok(count_objects(c, "fleet/c/") == N - 1, "exactly %d objects: no duplicates", N - 1);
        int same = 0;
        for (int i = 0; i < N - 1; i++) {
                char key[256];
                snprintf(key, sizeof key, "fleet/c/2026-01-02/%02d%02d/demo/test-host/abcd-4242/%lld-%d.bin.gz",
                         3, i, 1767322800ll + 60 * i, i);
                same += object_matches(c, key, paths[i]);
        }
        ok(same == N - 1, "all %d surviving segments download byte-identical (%d)", N - 1, same);
        ok(count_jobs(state) == 0, "no pending jobs left");
        d9d_ship_config_free(&cfg);
}

/* The proxy dies while a (rate-limited, ~2 s) PUT is on the wire. */
static void interrupted_upload_completes(struct s3_client *c)
{
        char dir[128], state[128], path[200], cmd[512];
        struct ship_config cfg;
        struct shipper *s;
        struct ship_stats st;
        snprintf(dir, sizeof dir, "%s/cut", work);
        snprintf(state, sizeof state, "%s/cut-state", work);
        snprintf(path, sizeof path, "%s/trace.7.bin", dir);
        snprintf(cmd, sizeof cmd, "mkdir -p %s && gzip -dc %s > %s", dir, fixture, path);
        if (system(cmd) != 0)
                bail("%s", cmd);
        shipper_config(&cfg, state, "fleet/e");
        cfg.s3.max_upload_rate = 2 << 20;
        if (shipper_start(&cfg, &s) < 0)
                bail("shipper_start");
        struct segment_meta m = meta_for(7);
        shipper_enqueue(s, path, &m);
        usleep(700000);
        shipper_stats(s, &st);
        ok(st.uploads_ok == 0 && st.uploads_failed == 0 && st.queue_len == 1,
           "4 MB upload at 2 MB/s still in flight after 0.7 s");
        harness_cmd("proxy-stop");
        wait_for(s, one_failed, "the interrupted upload to fail");
        shipper_stats(s, &st);
        ok(st.uploads_ok == 0, "interrupted upload reported as failed: %s", st.last_error);
        ok(count_jobs(state) == 1 && access(path, F_OK) == 0, "segment and job kept");
        harness_cmd("proxy-start");
        ok(shipper_flush(s, 90000) == 0, "upload completes once the proxy is back");
        shipper_stats(s, &st);
        shipper_stop(s);
        ok(st.uploads_ok == 1 && count_objects(c, "fleet/e/") == 1, "exactly one object");
        ok(object_matches(c, "fleet/e/2026-01-02/0307/demo/test-host/abcd-4242/1767323220-7.bin", path),
           "and it is byte-identical to the segment");
        d9d_ship_config_free(&cfg);
}

static void delete_after_upload(struct s3_client *c)
{
        char dir[128], state[128], path[200];
        struct ship_config cfg;
        struct shipper *s;
        size_t len = 0;
        snprintf(dir, sizeof dir, "%s/del", work);
        snprintf(state, sizeof state, "%s/del-state", work);
        make_segments(dir, 1);
        snprintf(path, sizeof path, "%s/trace.0.bin.gz", dir);
        uint8_t *want = read_file(path, &len);
        shipper_config(&cfg, state, "fleet/d");
        cfg.delete_after_upload = true;
        if (shipper_start(&cfg, &s) < 0)
                bail("shipper_start");
        struct segment_meta m = meta_for(0);
        shipper_enqueue(s, path, &m);
        ok(shipper_flush(s, 60000) == 0, "delete-after-upload: queue drains");
        shipper_stop(s);
        ok(access(path, F_OK) < 0 && errno == ENOENT, "local segment deleted after the upload");
        struct d9_buf got = { 0 };
        ok(s3_get_object(c, "fleet/d/2026-01-02/0300/demo/test-host/abcd-4242/1767322800-0.bin.gz", &got) == 0 &&
           got.len == len && !memcmp(got.data, want, len), "and the object is there, byte-identical");
        d9_buf_free(&got);
        free(want);
        d9d_ship_config_free(&cfg);
}

static void config_keys(void)
{
        struct ship_config cfg;
        const char *why = NULL;
        d9d_ship_config_init(&cfg);
        ok(d9d_ship_config_set(&cfg, "s3_bucket", "b", &why) == 0 && !strcmp(cfg.s3.bucket, "b"), "s3_bucket");
        ok(d9d_ship_config_set(&cfg, "s3_prefix", "p/q/", &why) == 0 && !strcmp(cfg.s3.prefix, "p/q"),
           "s3_prefix drops a trailing '/'");
        ok(d9d_ship_config_set(&cfg, "s3_part_size", "1M", &why) == -EINVAL && why, "part size below 5M rejected: %s", why);
        ok(d9d_ship_config_set(&cfg, "s3_delete_after_upload", "yes", &why) == 0 && cfg.delete_after_upload,
           "s3_delete_after_upload");
        ok(d9d_ship_config_set(&cfg, "rotate_period", "60s", &why) == -ENOENT, "a non-S3 key is left to the caller");
        d9d_ship_config_free(&cfg);
}

int main(int argc, char **argv)
{
        struct s3_config cfg;
        struct s3_client *c;
        if (argc < 3)
                bail("usage: %s FIXTURE HARNESS", argv[0]);
        fixture = argv[1];
        harness = argv[2];
        snprintf(work, sizeof work, "/tmp/d9-ship-test.XXXXXX");
        if (!mkdtemp(work))
                bail("mkdtemp");
        s3env_config(&cfg, BUCKET);
        if (s3_client_new(&cfg, &c) < 0)
                bail("s3_client_new");
        config_keys();
        segments_land_under_dial9_keys(c);
        wrong_secret_keeps_then_restart_resumes(c);
        delete_after_upload(c);
        outage_loses_and_duplicates_nothing(c);
        interrupted_upload_completes(c);
        s3_client_free(c);
        s3_config_free(&cfg);
        sh("rm -rf %s", work);
        return tap_done();
}
