/* S3 shipping benchmark against the loopback Swift of tests/s3/swift-harness:
 * SHA-256 payload hashing (SigV4 needs it for every byte), one PUT vs a
 * multipart upload of the same bytes, and the shipper end to end on copies
 * of dial9's recorded fixture. Prints MB/s side by side with ratios.
 * usage: swift-harness run --bucket d9-bench -- s3-ship-bench FIXTURE [N_SEGMENTS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/ship/s3/s3_int.h"
#include "daemon/ship/ship.h"

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void env_config(struct s3_config *cfg)
{
        s3_config_init(cfg);
        cfg->bucket = strdup("d9-bench");
        cfg->endpoint = strdup(getenv("D9_S3_ENDPOINT"));
        cfg->access_key = strdup(getenv("D9_S3_ACCESS_KEY"));
        cfg->secret_key = strdup(getenv("D9_S3_SECRET_KEY"));
        cfg->region = strdup("us-east-1");
}

static double hash_mb_s(const uint8_t *data, size_t len)
{
        char hex[65];
        double t = now_s();
        for (int i = 0; i < 8; i++)
                s3_sha256_hex(data, len, hex);
        return 8.0 * (double)len / 1e6 / (now_s() - t);
}

static double put_mb_s(struct s3_config *cfg, const char *path, size_t len, uint64_t threshold)
{
        struct s3_client *c;
        cfg->multipart_threshold = threshold;
        cfg->part_size = S3_MIN_PART_SIZE;
        if (s3_client_new(cfg, &c) < 0)
                return 0;
        double best = 0;
        for (int i = 0; i < 3; i++) {
                double t = now_s();
                if (s3_put_file(c, "bench/object.bin", path, NULL) < 0) {
                        fprintf(stderr, "upload failed: %s\n", s3_client_last_error(c));
                        break;
                }
                double mb_s = (double)len / 1e6 / (now_s() - t);
                best = mb_s > best ? mb_s : best;
        }
        s3_client_free(c);
        return best;
}

static double ship_segments_s(const char *fixture, int n, double *mb_s)
{
        char dir[] = "/tmp/d9-ship-bench.XXXXXX", cmd[512], path[256];
        struct ship_config cfg;
        struct shipper *s;
        struct ship_stats st;
        if (!mkdtemp(dir))
                return 0;
        for (int i = 0; i < n; i++) {
                snprintf(cmd, sizeof cmd, "cp %s %s/trace.%d.bin.gz", fixture, dir, i);
                if (system(cmd) != 0)
                        return 0;
        }
        d9d_ship_config_init(&cfg);
        env_config(&cfg.s3);
        cfg.s3.instance = strdup("bench");
        snprintf(path, sizeof path, "%s/state", dir);
        cfg.state_dir = strdup(path);
        if (shipper_start(&cfg, &s) < 0)
                return 0;
        double t = now_s();
        for (int i = 0; i < n; i++) {
                struct segment_meta m = { .service = "bench", .boot_id = "benc-1", .pid = 1,
                                          .index = (uint64_t)i, .start_realtime_ns = 1767322800000000000ll };
                snprintf(path, sizeof path, "%s/trace.%d.bin.gz", dir, i);
                shipper_enqueue(s, path, &m);
        }
        shipper_flush(s, 300000);
        double dt = now_s() - t;
        shipper_stats(s, &st);
        shipper_stop(s);
        d9d_ship_config_free(&cfg);
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", dir);
        *mb_s = (double)st.bytes_shipped / 1e6 / dt;
        return (double)st.uploads_ok / dt;
}

int main(int argc, char **argv)
{
        if (argc < 2 || !getenv("D9_S3_ENDPOINT")) {
                fprintf(stderr, "usage: swift-harness run --bucket d9-bench -- %s FIXTURE [N]\n", argv[0]);
                return 2;
        }
        int n = argc > 2 ? atoi(argv[2]) : 20;
        size_t len = 16u << 20;
        uint8_t *data = malloc(len);
        for (size_t i = 0; i < len; i++)
                data[i] = (uint8_t)(i * 2654435761u >> 13);
        char path[] = "/tmp/d9-s3-bench.XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0 || write(fd, data, len) != (ssize_t)len)
                return 1;
        close(fd);
        struct s3_config cfg;
        env_config(&cfg);
        double hash = hash_mb_s(data, len);
        double single = put_mb_s(&cfg, path, len, 0);
        double multi = put_mb_s(&cfg, path, len, 1);
        double ship_mb_s = 0, ship = ship_segments_s(argv[1], n, &ship_mb_s);
        printf("sha256 (SigV4 payload hash)     %8.1f MB/s\n", hash);
        printf("PUT 16 MiB, one request         %8.1f MB/s\n", single);
        printf("PUT 16 MiB, multipart 5 MiB     %8.1f MB/s   (%.2fx of one request)\n", multi,
               single > 0 ? multi / single : 0);
        printf("shipper, %d x fixture segments  %8.1f MB/s   %.1f segments/s (%.2fx of one-request PUT)\n", n,
               ship_mb_s, ship, single > 0 ? ship_mb_s / single : 0);
        printf("upload / hashing ratio          %8.3f\n", hash > 0 ? single / hash : 0);
        unlink(path);
        free(data);
        s3_config_free(&cfg);
        return 0;
}
