/* Daemon core without BPF: config parsing, control-protocol validation,
 * segment writing, sealing (symbols + compression), crash-recovery trim and
 * disk-budget eviction, each against real files in a temp dir. TAP output. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "daemon/seal/budget.h"
#include "daemon/core/config.h"
#include "daemon/symbolize/kallsyms.h"
#include "daemon/symbolize/jit_map.h"
#include "proto/d9control.h"
#include "proto/d9proto.h"
#include "daemon/seal/recover.h"
#include "daemon/seal/sealer.h"
#include "daemon/record/segment.h"
#include "daemon/symbolize/symbolize.h"

static int n_test, n_fail;
static char tmpdir[256];

static void ok(int cond, const char *fmt, ...)
{
        va_list ap;

        n_test++;
        if (!cond)
                n_fail++;
        printf("%sok %d - ", cond ? "" : "not ", n_test);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
}

struct counts {
        unsigned clock_sync, metadata, poll_start, poll_end, cpu, symbols, lost;
        char symbol_for_self[256];
        uint64_t self_addr;
        char service[64];
};

static int count_event(const struct d9_dec_event *ev, void *ctx)
{
        struct counts *c = ctx;
        const char *n = ev->schema->name;

        if (!strcmp(n, "ClockSyncEvent"))
                c->clock_sync++;
        else if (!strcmp(n, "SegmentMetadataEvent")) {
                struct d9_value_iter it;
                struct d9_value k, v;
                c->metadata++;
                d9_value_iter_init(&it, &ev->values[0]);
                while (d9_value_iter_next(&it, &k) && d9_value_iter_next(&it, &v))
                        if (k.str.len == 7 && !memcmp(k.str.p, "service", 7))
                                snprintf(c->service, sizeof(c->service), "%.*s", (int)v.str.len, v.str.p);
        } else if (!strcmp(n, "PollStartEvent"))
                c->poll_start++;
        else if (!strcmp(n, "PollEndEvent"))
                c->poll_end++;
        else if (!strcmp(n, "CpuSampleEvent"))
                c->cpu++;
        else if (!strcmp(n, "D9LostEventsEvent"))
                c->lost++;
        else if (!strcmp(n, "SymbolTableEntry")) {
                c->symbols++;
                if (ev->values[0].u == c->self_addr)
                        snprintf(c->symbol_for_self, sizeof(c->symbol_for_self), "%.*s",
                                 (int)ev->values[2].str.len, ev->values[2].str.p);
        }
        return 0;
}

static int decode_file(const char *path, struct counts *c, bool strict)
{
        uint8_t *raw;
        size_t len;
        struct d9_dec_opts o = { .strict = strict, .on_event = count_event, .ctx = c };
        struct d9_dec_result res;
        int r = d9_read_trace_file(path, &raw, &len, NULL);

        if (r < 0)
                return r;
        r = d9_decode(raw, len, &o, &res);
        free(raw);
        return r;
}

/* A function whose address the sealer must name. */
__attribute__((noinline)) int d9_test_symbol_target(int x);
__attribute__((noinline)) int d9_test_symbol_target(int x)
{
        return x * 3 + 1;
}

static int write_segment(struct segment_writer *sw, unsigned polls, uint64_t addr)
{
        struct d9_kv meta[] = { { "service", "unit" }, { "runtime.main", "0,1" } };
        uint32_t stack, label;
        int r = segment_open(sw, meta, 2);

        if (r < 0)
                return r;
        d9_enc_intern_string(sw->enc, "src/main.rs:1:1", 15, &label);
        d9_enc_intern_stack(sw->enc, &addr, 1, &stack);
        for (unsigned i = 0; i < polls && !r; i++) {
                r = d9_enc_poll_start(sw->enc, 1000000 + i * 100, i % 2, 0, i + 1, label);
                if (!r)
                        r = d9_enc_poll_end(sw->enc, 1000050 + i * 100, i % 2);
        }
        if (!r)
                r = d9_enc_cpu_sample(sw->enc, 2000000, 0, 1234, 0, D9_NO_ATOM, stack, 1);
        return r;
}

static void test_config(void)
{
        struct d9d_config cfg;
        const char *why;
        char path[300];
        FILE *f;

        d9d_config_defaults(&cfg);
        ok(cfg.rotate_period_ms == 60000 && cfg.compression == D9_COMPRESS_ZSTD &&
           !strcmp(cfg.state_dir, "/var/lib/d9d"), "config defaults: 60 s rotation, zstd, /var/lib/d9d");
        snprintf(path, sizeof(path), "%s/d9d.conf", tmpdir);
        f = fopen(path, "w");
        fprintf(f, "# comment\nstate_dir = /tmp/x\nrotate_period = 5s\nmax_segment_size = 1M\n"
                   "disk_budget = 2G\ncompression = gzip\nsample_rate = 49\nservice = api\n");
        fclose(f);
        ok(d9d_config_load(&cfg, path, true) == 0 && !strcmp(cfg.state_dir, "/tmp/x") && cfg.rotate_period_ms == 5000 &&
           cfg.max_segment_bytes == 1 << 20 && cfg.disk_budget_bytes == 2ull << 30 &&
           cfg.compression == D9_COMPRESS_GZIP && cfg.sample_hz == 49 && !strcmp(cfg.service, "api"),
           "config file sets every key");
        ok(d9d_config_set(&cfg, "compression", "lz4", &why) == -EINVAL, "config rejects an unknown compression");
        ok(d9d_config_set(&cfg, "bogus", "1", &why) == -EINVAL && !strcmp(why, "unknown key"), "config rejects an unknown key");
        f = fopen(path, "w");
        fprintf(f, "no equals sign here\n");
        fclose(f);
        ok(d9d_config_load(&cfg, path, true) == -EINVAL, "config file without key = value is an error");
        ok(d9d_config_load(&cfg, "/nonexistent/d9d.conf", false) == 0, "missing default config file is fine");
        ok(d9d_config_load(&cfg, "/nonexistent/d9d.conf", true) == -ENOENT, "missing explicit config file is an error");
        d9d_config_free(&cfg);

        /* What a reload (SIGHUP) is told: the line that is wrong, and the
         * keys only a restart applies. */
        struct d9d_config a, b;
        char err[512], keys[128];

        f = fopen(path, "w");
        fprintf(f, "rotate_period = 5s\nattach = exe:api\nattach = unit:\n");
        fclose(f);
        d9d_config_defaults(&b);
        ok(d9d_config_read(&b, path, true, err, sizeof(err)) == -EINVAL && strstr(err, "d9d.conf:3: attach: unit: expects"),
           "d9d_config_read says file, line, key and why in one line: %s", err);
        d9d_config_free(&b);
        d9d_config_defaults(&a);
        d9d_config_defaults(&b);
        d9d_config_set(&a, "rotate_period", "5s", &why);
        d9d_config_set(&a, "service", "api", &why);
        d9d_config_set(&a, "attach", "exe:api", &why);
        d9d_config_set(&b, "rotate_period", "7s", &why);
        d9d_config_set(&b, "compression", "gzip", &why);
        d9d_config_set(&b, "attach", "exe:other", &why);
        d9d_config_set(&b, "auto_attach_max", "3", &why);
        ok(d9d_config_restart_keys(&a, &b, keys, sizeof(keys)) == 3 && !strcmp(keys, "rotate_period, service, compression"),
           "a reload names changed, dropped and added keys, never attach or auto_attach_max: %s", keys);
        ok(d9d_config_restart_keys(&a, &a, keys, sizeof(keys)) == 0 && !keys[0], "an unchanged file names no key");
        d9d_config_free(&a);
        d9d_config_free(&b);
}

static void test_control_protocol(void)
{
        char why[256];
        uint64_t v;
        json_t *j;

        j = d9c_parse_request("{not json", 9, why, sizeof(why));
        ok(!j && strstr(why, "malformed JSON"), "control: malformed JSON is refused (%s)", why);
        j = d9c_parse_request("[1,2]", 5, why, sizeof(why));
        ok(!j && strstr(why, "object"), "control: a non-object is refused");
        j = d9c_parse_request("{\"v\":2,\"cmd\":\"list\"}", 20, why, sizeof(why));
        ok(!j && strstr(why, "version"), "control: another protocol version is refused");
        j = d9c_parse_request("{\"v\":1}", 7, why, sizeof(why));
        ok(!j && strstr(why, "cmd"), "control: a request without cmd is refused");
        j = d9c_parse_request("{\"v\":1,\"cmd\":\"list\"}", 20, why, sizeof(why));
        ok(j != NULL, "control: a valid request parses");
        json_decref(j);
        ok(d9c_parse_probes("all", NULL) == D9_PROBE_ALL && d9c_parse_probes("poll,park", NULL) ==
           (D9_PROBE_POLL | D9_PROBE_PARK) && d9c_parse_probes("poll,nope", NULL) == -EINVAL,
           "probe lists: all, subsets, unknown names refused");
        {
                char buf[96];

                d9c_format_probes(D9_PROBE_DEFAULT, buf, sizeof(buf));
                ok(d9c_parse_probes(NULL, NULL) == D9_PROBE_DEFAULT && d9c_parse_probes("default", NULL) ==
                   D9_PROBE_DEFAULT && !(D9_PROBE_DEFAULT & (D9_PROBE_PARK | D9_PROBE_POLL | D9_PROBE_SPAWN |
                   D9_PROBE_WAKE | D9_PROBE_TERMINATE)) && !strcmp(buf, "sched,cpu,longpoll") &&
                   d9c_parse_probes("longpoll,all", NULL) == (D9_PROBE_ALL | D9_PROBE_RUNS),
                   "no --probes is the default set: sched,cpu,longpoll, no uprobe group ('%s')", buf);
        }
        ok(d9_parse_duration_ms("10s", &v) == 0 && v == 10000 && d9_parse_duration_ms("250ms", &v) == 0 && v == 250 &&
           d9_parse_duration_ms("2m", &v) == 0 && v == 120000 && d9_parse_duration_ms("3", &v) == 0 && v == 3000 &&
           d9_parse_duration_ms("x", &v) < 0 && d9_parse_duration_ms("-1s", &v) < 0, "durations parse");
        ok(d9_parse_size("64M", &v) == 0 && v == 64 << 20 && d9_parse_size("4096", &v) == 0 && v == 4096 &&
           d9_parse_size("1Q", &v) < 0, "sizes parse");
}

/* The span as a listing reads it: from the first 16 KiB of the file only,
 * decompressed as far as they go. */
static int head_span(const char *path, struct d9_segment_span *span)
{
        uint8_t in[16384], out[D9_SPAN_HEAD_BYTES];
        size_t got = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : read(fd, in, sizeof(in));

        if (fd >= 0)
                close(fd);
        if (n <= 0)
                return -EIO;
        enum d9_compress kind = d9_compress_detect(in, (size_t)n);
        if (kind == D9_COMPRESS_NONE) {
                got = (size_t)n < sizeof(out) ? (size_t)n : sizeof(out);
                memcpy(out, in, got);
        } else if (kind == D9_COMPRESS_GZIP) {
                z_stream zs = { .next_in = in, .avail_in = (uInt)n, .next_out = out, .avail_out = sizeof(out) };
                inflateInit2(&zs, 15 + 16);
                inflate(&zs, Z_SYNC_FLUSH);
                got = sizeof(out) - zs.avail_out;
                inflateEnd(&zs);
        } else {
                ZSTD_DCtx *z = ZSTD_createDCtx();
                ZSTD_inBuffer ib = { in, (size_t)n, 0 };
                ZSTD_outBuffer ob = { out, sizeof(out), 0 };
                while (ib.pos < ib.size && ob.pos < ob.size && !ZSTD_isError(ZSTD_decompressStream(z, &ob, &ib)))
                        ;
                got = ob.pos;
                ZSTD_freeDCtx(z);
        }
        return d9_segment_span_read(out, got, span);
}

struct span_count {
        uint64_t first, last, events;
};

static int span_count_event(const struct d9_dec_event *ev, void *ctx)
{
        struct span_count *s = ctx;

        if (!ev->has_timestamp || !ev->ts || !strcmp(ev->schema->name, D9_SPAN_EVENT))
                return 0;
        if (!s->first)
                s->first = ev->ts;
        if (ev->ts > s->last)
                s->last = ev->ts;
        s->events++;
        return 0;
}

/* The sealer writes in the first stream what a whole decode counts, and a
 * listing reads it from the first 16 KiB of a segment many times larger. */
static void test_seal_span(enum d9_compress kind, const char *suffix)
{
        struct segment_writer sw;
        struct seal_job job = { .compression = kind, .root_fd = -1 };
        struct d9_segment_span span, before;
        struct span_count want = { 0 };
        struct d9_dec_opts o = { .strict = true, .on_event = span_count_event, .ctx = &want };
        struct d9_dec_result res;
        struct stat st;
        uint8_t *raw = NULL;
        size_t len = 0;
        uint32_t label;
        char dir[300];
        int r;

        snprintf(dir, sizeof(dir), "%s/span%s/svc/1-2", tmpdir, suffix);
        r = segment_writer_init(&sw, dir);
        if (!r)
                r = segment_open(&sw, (struct d9_kv[]){ { "service", "unit" } }, 1);
        if (!r)
                r = d9_enc_intern_string(sw.enc, "src/main.rs:1:1", 15, &label);
        /* 100,000 polls of scattered task ids, from now on: 0.1 s, MiBs raw. */
        uint64_t t0 = d9_now_ns();
        for (unsigned i = 0; i < 100000 && !r; i++) {
                uint64_t ts = t0 + i * 997ull, task = (i * 2654435761u) % 1000003 + 1;
                r = d9_enc_poll_start(sw.enc, ts, i % 4, 0, task, label);
                if (!r)
                        r = d9_enc_poll_end(sw.enc, ts + (task % 500), i % 4);
        }
        ok(r == 0 && segment_close(&sw, job.active, sizeof(job.active)) == 0, "span%s: 200,000-event segment written", suffix);
        int hr = head_span(job.active, &before);
        ok(hr == -ENODATA && before.events == 0, "span%s: the .active segment's span event is there and empty (%d)", suffix, hr);
        ok(seal_segment(&job) == 0, "span%s: sealed", suffix);
        r = d9_read_trace_file(job.sealed, &raw, &len, NULL);
        ok(r == 0 && d9_decode(raw, len, &o, &res) == 0, "span%s: sealed file decodes strictly after the patch", suffix);
        free(raw);
        int sr = stat(job.sealed, &st);
        ok(sr == 0 && st.st_size > 4 * 16384, "span%s: the sealed file (%lld bytes) is far more than the 16 KiB read",
           suffix, (long long)st.st_size);
        hr = head_span(job.sealed, &span);
        ok(hr == 0 && span.events == want.events && span.first_ts == want.first && span.last_ts == want.last && span.synced &&
           span.sync_ts == want.first,
           "span%s: the first 16 KiB say %llu events, %llu..%llu ns (a whole decode: %llu, %llu..%llu)", suffix,
           (unsigned long long)span.events, (unsigned long long)span.first_ts, (unsigned long long)span.last_ts,
           (unsigned long long)want.events, (unsigned long long)want.first, (unsigned long long)want.last);
        segment_writer_destroy(&sw);
}

static void test_seal(enum d9_compress kind, const char *suffix)
{
        struct segment_writer sw;
        struct seal_job job = { .compression = kind, .root_fd = -1 };
        struct counts c = { .self_addr = (uint64_t)(uintptr_t)&d9_test_symbol_target };
        char dir[300];

        snprintf(dir, sizeof(dir), "%s/seal%s/svc/1-2", tmpdir, suffix);
        ok(segment_writer_init(&sw, dir) == 0 && write_segment(&sw, 100, c.self_addr) == 0 &&
           segment_close(&sw, job.active, sizeof(job.active)) == 0, "segment%s: written", suffix);
        job.maps = symbolizer_read_proc_text("/proc/self/maps");
        ok(seal_segment(&job) == 0, "segment%s: sealed to %s", suffix, job.sealed);
        ok(access(job.active, F_OK) != 0 && strstr(job.sealed, "trace.0.bin") &&
           !strcmp(job.sealed + strlen(job.sealed) - strlen(suffix), suffix), "segment%s: .active renamed away", suffix);
        ok(decode_file(job.sealed, &c, true) == 0, "segment%s: sealed file decodes strictly", suffix);
        ok(c.clock_sync == 2 && c.metadata == 1 && !strcmp(c.service, "unit"),
           "segment%s: ClockSync, SegmentMetadata (service=unit), ClockSync first", suffix);
        ok(c.poll_start == 100 && c.poll_end == 100 && c.cpu == 1, "segment%s: all 200 poll events and the sample", suffix);
        ok(c.symbols == 1 && strstr(c.symbol_for_self, "d9_test_symbol_target"),
           "segment%s: callchain address symbolized as '%s'", suffix, c.symbol_for_self);
        free(job.maps);
        segment_writer_destroy(&sw);
}

static void test_rotation_index(void)
{
        struct segment_writer sw;
        char dir[300], p0[4096], p1[4096];

        snprintf(dir, sizeof(dir), "%s/rot/svc/1-2", tmpdir);
        segment_writer_init(&sw, dir);
        write_segment(&sw, 1, 0);
        segment_close(&sw, p0, sizeof(p0));
        write_segment(&sw, 1, 0);
        segment_close(&sw, p1, sizeof(p1));
        segment_writer_destroy(&sw);
        ok(strstr(p0, "trace.0.bin.active") && strstr(p1, "trace.1.bin.active"), "rotation: N counts up");
        segment_writer_init(&sw, dir);
        ok(sw.index == 2, "rotation: a new writer in the same folder continues at N=2, never reusing names");
        segment_writer_destroy(&sw);
}

static void test_recovery(void)
{
        struct segment_writer sw;
        struct counts c = { 0 };
        char dir[300], active[4096];
        struct stat st;
        long long cut;
        int fd;

        snprintf(dir, sizeof(dir), "%s/rec/svc/1-2", tmpdir);
        segment_writer_init(&sw, dir);
        write_segment(&sw, 1000, 0);
        segment_close(&sw, active, sizeof(active));
        segment_writer_destroy(&sw);
        stat(active, &st);
        /* Tear the tail: cut the file in the middle of the last frames. */
        ok(truncate(active, st.st_size - 7) == 0, "recovery: torn %s by 7 bytes", active);
        ok(decode_file(active, &c, true) != 0, "recovery: strict decode of the torn file fails");
        cut = seal_recover_trim(active);
        ok(cut > 0 && cut < 64, "recovery: trimmed %lld bytes of torn frame", cut);
        memset(&c, 0, sizeof(c));
        int dr = decode_file(active, &c, true);
        ok(dr == 0 && c.poll_start == 1000 && c.metadata == 1,
           "recovery: trimmed file decodes strictly with everything before the tear (%u polls)", c.poll_start);
        /* Garbage at the end (a frame tag no reader knows) is cut too. */
        fd = open(active, O_WRONLY | O_APPEND);
        (void)!write(fd, "\x77\x01\x02", 3);
        close(fd);
        ok(seal_recover_trim(active) == 3, "recovery: trailing garbage removed");

        /* A recovered segment has no session to say whose it is: its folder
         * does, as session.c laid it out (<service>/<pid>-<starttime>). */
        struct seal_job job = { 0 };
        ok(seal_job_identity_from_path(&job, active) == 0 && !strcmp(job.service, "svc") && job.pid == 1 &&
           job.starttime == 2 && job.index == 0,
           "recovery: service, pid, start time and N read off %s (%s %d %llu %u)", active, job.service, job.pid,
           (unsigned long long)job.starttime, job.index);
        struct seal_job stray = { 0 };
        ok(seal_job_identity_from_path(&stray, "/tmp/x/trace.3.bin.active") < 0 && !stray.service[0] &&
           seal_job_identity_from_path(&stray, "/a/svc/notapid/trace.3.bin.active") < 0 && !stray.service[0],
           "recovery: a segment outside a <service>/<pid>-<starttime> folder gets no identity (not shipped)");
}

static void make_file(const char *path, size_t size, time_t mtime)
{
        struct timespec ts[2] = { { mtime, 0 }, { mtime, 0 } };
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        if (ftruncate(fd, (off_t)size) < 0)
                perror("ftruncate");
        futimens(fd, ts);
        close(fd);
}

static void test_budget(void)
{
        char dir[300], p[400];
        struct budget_result br;
        time_t now = time(NULL);

        snprintf(dir, sizeof(dir), "%s/budget/a/1-1", tmpdir);
        struct segment_writer sw;
        segment_writer_init(&sw, dir); /* creates the folders */
        segment_writer_destroy(&sw);
        for (int i = 0; i < 5; i++) {
                snprintf(p, sizeof(p), "%s/trace.%d.bin.zst", dir, i);
                make_file(p, 1000, now - 100 + i);
        }
        snprintf(p, sizeof(p), "%s/trace.5.bin.active", dir);
        make_file(p, 5000, now - 1000);
        snprintf(dir, sizeof(dir), "%s/budget", tmpdir);
        ok(seal_budget_enforce(dir, 3000, &br) == 0 && br.total_bytes == 5000 && br.evicted == 2 && br.evicted_bytes == 2000,
           "budget: 5 x 1000 bytes over a 3000 budget evicts 2");
        snprintf(p, sizeof(p), "%s/a/1-1/trace.0.bin.zst", dir);
        ok(access(p, F_OK) != 0, "budget: the oldest (trace.0) went first");
        snprintf(p, sizeof(p), "%s/a/1-1/trace.4.bin.zst", dir);
        ok(access(p, F_OK) == 0, "budget: the newest stays");
        snprintf(p, sizeof(p), "%s/a/1-1/trace.5.bin.active", dir);
        ok(access(p, F_OK) == 0, "budget: .active files are never evicted");
}

/* Address of a text symbol as /proc/kallsyms shows it (0: hidden or absent). */
static unsigned long long kallsyms_addr_of(const char *want)
{
        FILE *f = fopen("/proc/kallsyms", "re");
        char line[512], name[256], type;
        unsigned long long addr, found = 0;

        while (f && !found && fgets(line, sizeof(line), f))
                if (sscanf(line, "%llx %c %255s", &addr, &type, name) == 3 && strcmp(name, want) == 0)
                        found = addr;
        if (f)
                fclose(f);
        return found;
}

/* The sealer's kernel names come from one shared table, read once. */
static void test_kernel_symbols_shared(void)
{
        unsigned long long sched = kallsyms_addr_of("schedule");
        struct symbolizer *a = symbolizer_new(getpid(), NULL), *b = symbolizer_new(getpid(), NULL);
        uint64_t size;

        ok(sched != 0, "/proc/kallsyms shows schedule's address (root)");
        const char *na = symbolizer_lookup(a, sched + 1, &size);
        const char *nb = symbolizer_lookup(b, sched + 1, &size);
        ok(na && strcmp(na, "schedule") == 0, "a kernel pc inside schedule is named schedule (%s)",
           na ? na : "NULL");
        ok(na && na == nb, "two symbolizers share one kernel symbol table (same name storage)");
        symbolizer_free(a);
        struct ksyms *k = ksyms_get();
        ok(k && ksyms_lookup(k, sched) == nb, "the table outlives a symbolizer that used it");
        ksyms_put(k);
        symbolizer_free(b);
        /* The drain loop's way in: no read of its own, the same table. */
        k = ksyms_get_ready();
        ok(k && ksyms_lookup(k, sched) == nb, "ksyms_get_ready hands out the table already read, not a new one");
        ksyms_put(k);
}

/* Code with no file behind it (a JIT's) is told apart from lost frames. */
static void test_anonymous_code(void)
{
        static char maps[1 << 16];
        void *code = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        void *data = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
        ssize_t n = 0, got;

        while (fd >= 0 && (got = read(fd, maps + n, sizeof(maps) - 1 - (size_t)n)) > 0)
                n += got;
        if (fd >= 0)
                close(fd);
        ok(n > 0 && code != MAP_FAILED && data != MAP_FAILED, "an anonymous executable and a data mapping");
        maps[n > 0 ? n : 0] = 0;
        struct symbolizer *s = symbolizer_new(getpid(), maps);
        ok(symbolizer_in_anonymous_code(s, (uint64_t)(uintptr_t)code + 100),
           "an address in the anonymous executable mapping is anonymous code");
        ok(!symbolizer_in_anonymous_code(s, (uint64_t)(uintptr_t)data + 100), "a data mapping is not");
        ok(!symbolizer_in_anonymous_code(s, (uint64_t)(uintptr_t)&test_anonymous_code),
           "this program's own text is not");
        symbolizer_free(s);
        munmap(code, 4096);
        munmap(data, 4096);
}

/* The kernel's uprobe page ("[uprobes]": the out-of-line step, the
 * uretprobe trampoline) is d9d's probe, named as its trap is; code with
 * no file next to it is not. The line as kernel 6.18 prints it. */
static void test_uprobes_page(void)
{
        const char *maps = "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 \n"
                           "7fffffffe000-7ffffffff000 r-xp 00000000 00:00 0                          [uprobes]\n";
        struct symbolizer *s = symbolizer_new(getpid(), maps);
        uint64_t size = 0;
        const char *in = symbolizer_lookup(s, 0x7fffffffe00dull, &size);
        const char *beside = symbolizer_lookup(s, 0x7f0000000010ull, &size);

        ok(in && !strcmp(in, "[d9d uprobe]"), "a pc in the [uprobes] page is [d9d uprobe] (%s)", in ? in : "NULL");
        ok(!beside && symbolizer_in_anonymous_code(s, 0x7f0000000010ull) &&
           !symbolizer_in_anonymous_code(s, 0x7fffffffe00dull),
           "anonymous code beside it is not, and the page is no anonymous code");
        symbolizer_free(s);
}

/* A JIT's perf map inside a target's root: read only as a regular file of
 * the target's user (or root), never through a symlink, later lines win. */
static void test_jit_map(void)
{
        char root[300], path[400];
        struct jit_map *m = NULL;
        FILE *f;

        snprintf(root, sizeof(root), "%s/jitroot", tmpdir);
        snprintf(path, sizeof(path), "%s/tmp", root);
        ok(mkdir(root, 0755) == 0 && mkdir(path, 01777) == 0, "a target root with a tmp directory");
        snprintf(path, sizeof(path), "%s/tmp/perf-77.map", root);
        f = fopen(path, "w");
        fprintf(f, "1000 100 JS:*handler file:///srv/app.js:3:1\n"
                   "1100 40 JS:~helper file:///srv/app.js:9:5\n"
                   "garbage line\n"
                   "1000 80 JS:*handler2 file:///srv/app.js:3:1\n"
                   "2000 10 half written");      /* no newline yet: not read */
        fclose(f);
        int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        int r = jit_map_load(rootfd, 77, 4242, &m);
        ok(r == 0 && jit_map_count(m) == 3, "the map is read: 3 good lines (r %d, %zu)", r, jit_map_count(m));
        const char *a = jit_map_lookup(m, 0x1010), *b = jit_map_lookup(m, 0x1090), *c = jit_map_lookup(m, 0x1120);
        ok(a && !strcmp(a, "JS:*handler2 file:///srv/app.js:3:1"), "recompiled code: the later line wins (%s)", a);
        ok(b && !strcmp(b, "JS:*handler file:///srv/app.js:3:1"), "past the new code's end the older one holds (%s)", b);
        ok(c && !strcmp(c, "JS:~helper file:///srv/app.js:9:5"), "a second function (%s)", c);
        ok(!jit_map_lookup(m, 0x2005) && !jit_map_lookup(m, 0xfff), "the half-written line and gaps name nothing");
        jit_map_free(m);
        ok(chown(path, 12345, 12345) == 0 && jit_map_load(rootfd, 77, 4242, &m) == -EPERM && !m,
           "another user's map is refused");
        ok(jit_map_load(rootfd, 77, 12345, &m) == 0 && m, "the target user's own map is read");
        jit_map_free(m);
        char other[400];
        snprintf(other, sizeof(other), "%s/tmp/perf-78.map", root);
        r = symlink(path, other) == 0 ? jit_map_load(rootfd, 78, 12345, &m) : -errno;
        ok(r == -EBADFD && !m, "a symlink is not followed (r %d)", r);
        snprintf(other, sizeof(other), "%s/tmp/perf-79.map", root);
        ok(mkfifo(other, 0644) == 0 && jit_map_load(rootfd, 79, 0, &m) == -EBADFD,
           "a FIFO is refused without blocking");
        ok(jit_map_load(rootfd, 80, 0, &m) == -ENOENT, "no map: -ENOENT");
        close(rootfd);
}

int main(void)
{
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/d9d-test-core.XXXXXX");
        if (!mkdtemp(tmpdir)) {
                printf("Bail out! mkdtemp: %s\n", strerror(errno));
                return 1;
        }
        test_config();
        test_control_protocol();
        test_seal(D9_COMPRESS_ZSTD, ".zst");
        test_seal(D9_COMPRESS_GZIP, ".gz");
        test_seal(D9_COMPRESS_NONE, ".bin");
        test_seal_span(D9_COMPRESS_ZSTD, ".zst");
        test_seal_span(D9_COMPRESS_GZIP, ".gz");
        test_seal_span(D9_COMPRESS_NONE, ".bin");
        test_rotation_index();
        test_recovery();
        test_budget();
        test_kernel_symbols_shared();
        test_anonymous_code();
        test_uprobes_page();
        test_jit_map();
        printf("1..%d\n", n_test);
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
        if (!n_fail && system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", tmpdir);
        return n_fail ? 1 : 0;
}
