/* drain_bench: how many events per second one core of d9d drains from a
 * real BPF ring buffer, translates and encodes into a segment, and whether
 * any are dropped. A synthetic BPF program (producer.bpf.c), run in a loop
 * by a producer thread pinned to one CPU, fills the ring; the consumer,
 * pinned to another CPU, runs d9d's own drain path: libbpf ring_buffer ->
 * translate_record() -> d9proto encoder -> segment file (rotated at 64 MiB;
 * sealing is off this path in d9d and is not measured here).
 *
 * usage: drain_bench SECONDS [RATE]   RATE = records/s to pace the producer
 *        (0 = as fast as it can); producer and consumer run concurrently.
 *        drain_bench burst ROUNDS   fill the ring to the brim (no consumer
 *        running), then time draining it: the per-core drain rate with no
 *        scheduling noise from the producer or other processes' load.
 * Prints one line of key=value results. */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "producer.skel.h"
#include "daemon/record/segment.h"
#include "daemon/record/translate.h"
#include "uprobes/uprobes.h"

#define ROTATE_BYTES (64ull << 20)

static atomic_bool stop_producer;

struct producer {
        struct producer_bpf *skel;
        double rate;            /* records/s, 0 = flat out */
        unsigned cpu;
};

static double now_s(clockid_t clk)
{
        struct timespec ts;

        clock_gettime(clk, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pin(unsigned cpu)
{
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof(set), &set);
}

static void *producer_main(void *arg)
{
        struct producer *p = arg;
        int fd = bpf_program__fd(p->skel->progs.produce);
        double t0 = now_s(CLOCK_MONOTONIC);
        uint64_t runs = 0;
        LIBBPF_OPTS(bpf_test_run_opts, opts);

        pin(p->cpu);
        while (!atomic_load(&stop_producer)) {
                if (bpf_prog_test_run_opts(fd, &opts) < 0) {
                        fprintf(stderr, "drain_bench: BPF_PROG_RUN failed: %s\n", strerror(errno));
                        break;
                }
                runs++;
                if (p->rate > 0) {
                        double due = t0 + (double)(runs * p->skel->data->batch) / p->rate;
                        double wait = due - now_s(CLOCK_MONOTONIC);
                        if (wait > 0) {
                                struct timespec ts = { (time_t)wait, (long)((wait - (time_t)wait) * 1e9) };
                                nanosleep(&ts, NULL);
                        }
                }
        }
        return NULL;
}

struct consumer {
        struct segment_writer seg;
        struct translate tr;
        uint64_t consumed;
        struct d9_kv meta[1];
};

static int on_record(void *ctx, void *data, size_t size)
{
        struct consumer *c = ctx;

        c->consumed++;
        return translate_record(&c->tr, data, size);
}

static int rotate(struct consumer *c)
{
        char path[4096];
        int r = segment_close(&c->seg, path, sizeof(path));

        if (r == 0)
                unlink(path); /* sealing is not what we measure */
        r = segment_open(&c->seg, c->meta, 1);
        return r ? r : translate_set_encoder(&c->tr, c->seg.enc);
}

/* A plan with eight future types, so poll labels are interned as in d9d. */
static struct probe_plan *fake_plan(void)
{
        static struct probe_point points[9];
        static struct probe_plan plan = { .points = points, .n_points = 9 };
        static char labels[8][64];

        for (int i = 0; i < 8; i++) {
                snprintf(labels[i], sizeof(labels[i]), "bench::service::handler_%d::{{closure}}", i);
                points[i] = (struct probe_point){ .kind = PROBE_POLL, .cookie = (uint64_t)i, .label = labels[i] };
        }
        points[8] = (struct probe_point){ .kind = PROBE_SPAWN, .cookie = 8, .label = (char *)"" };
        return &plan;
}

/* Fill until the first drop (ring full), then drain it all and time that. */
static int run_burst(struct producer *p, struct consumer *c, struct ring_buffer *rb, int rounds)
{
        int fd = bpf_program__fd(p->skel->progs.produce);
        double wall = 0, cpu = 0;
        uint64_t drained = 0;
        LIBBPF_OPTS(bpf_test_run_opts, opts);

        p->skel->data->batch = 1024;
        for (int i = 0; i < rounds; i++) {
                uint64_t before = p->skel->bss->dropped;
                while (p->skel->bss->dropped == before)
                        if (bpf_prog_test_run_opts(fd, &opts) < 0)
                                return -errno;
                uint64_t c_before = c->consumed;
                double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
                while (ring_buffer__consume(rb) > 0)
                        ;
                wall += now_s(CLOCK_MONOTONIC) - w0;
                cpu += now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
                drained += c->consumed - c_before;
                if (segment_size(&c->seg) >= ROTATE_BYTES && rotate(c) < 0)
                        return -EIO;
        }
        printf("mode=burst rounds=%d drained=%llu wall_s=%.3f cpu_s=%.3f events_per_s=%.0f events_per_cpu_s=%.0f "
               "encode_errors=%d\n", rounds, (unsigned long long)drained, wall, cpu, (double)drained / wall,
               (double)drained / cpu, c->tr.error);
        return c->tr.error;
}

int main(int argc, char **argv)
{
        bool burst = argc > 1 && !strcmp(argv[1], "burst");
        double secs = argc > 1 ? atof(argv[burst ? 2 : 1]) : 3, rate = argc > 2 && !burst ? atof(argv[2]) : 0;
        struct producer p = { .rate = rate, .cpu = 1 };
        struct consumer c = { .meta = { { "service", "drain-bench" } } };
        char dir[] = "/tmp/d9-drain-bench.XXXXXX";
        struct ring_buffer *rb;
        pthread_t th;
        int r;

        if (secs <= 0 || !mkdtemp(dir)) {
                fprintf(stderr, "usage: drain_bench SECONDS [RATE]\n");
                return 2;
        }
        p.skel = producer_bpf__open_and_load();
        if (!p.skel) {
                fprintf(stderr, "drain_bench: cannot load the BPF producer: %s\n", strerror(errno));
                return 1;
        }
        if (segment_writer_init(&c.seg, dir) < 0 || translate_init(&c.tr, getpid(), fake_plan(), true, true) < 0 ||
            segment_open(&c.seg, c.meta, 1) < 0 || translate_set_encoder(&c.tr, c.seg.enc) < 0) {
                fprintf(stderr, "drain_bench: cannot open a segment in %s\n", dir);
                return 1;
        }
        rb = ring_buffer__new(bpf_map__fd(p.skel->maps.bench_ring), on_record, &c, NULL);
        if (!rb) {
                fprintf(stderr, "drain_bench: ring_buffer__new: %s\n", strerror(errno));
                return 1;
        }
        pin(0);
        if (burst) {
                r = run_burst(&p, &c, rb, (int)secs);
                char last[4096];
                segment_close(&c.seg, last, sizeof(last));
                unlink(last);
                rmdir(dir);
                return r ? 1 : 0;
        }
        p.skel->data->batch = 4096; /* fewer syscalls: the producer must outrun the consumer */
        double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
        pthread_create(&th, NULL, producer_main, &p);
        while (now_s(CLOCK_MONOTONIC) - w0 < secs) {
                r = ring_buffer__poll(rb, 50);
                if (r < 0 && r != -EINTR) {
                        fprintf(stderr, "drain_bench: ring_buffer__poll: %s\n", strerror(-r));
                        return 1;
                }
                if (segment_size(&c.seg) >= ROTATE_BYTES && rotate(&c) < 0)
                        return 1;
        }
        atomic_store(&stop_producer, true);
        pthread_join(th, NULL);
        while (ring_buffer__consume(rb) > 0)
                ;
        double wall = now_s(CLOCK_MONOTONIC) - w0, cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        uint64_t bytes = segment_size(&c.seg);
        char last[4096];
        segment_close(&c.seg, last, sizeof(last));
        unlink(last);
        rmdir(dir);
        printf("rate_asked=%.0f produced=%llu consumed=%llu dropped=%llu wall_s=%.2f consumer_cpu_s=%.2f "
               "events_per_s=%.0f events_per_cpu_s=%.0f events_written=%llu last_segment_bytes=%llu encode_errors=%d\n",
               rate, (unsigned long long)p.skel->bss->produced, (unsigned long long)c.consumed,
               (unsigned long long)p.skel->bss->dropped, wall, cpu, (double)c.consumed / wall,
               cpu > 0 ? (double)c.consumed / cpu : 0, (unsigned long long)c.tr.events,
               (unsigned long long)bytes, c.tr.error);
        ring_buffer__free(rb);
        producer_bpf__destroy(p.skel);
        translate_destroy(&c.tr);
        segment_writer_destroy(&c.seg);
        return c.tr.error ? 1 : 0;
}
