/* bench/verify: how long the kernel's verifier takes over each of d9d's BPF
 * programs, and how many instructions it walked (BPF_LOG_STATS), the cost
 * d9d pays at its first attach. Loads d9_sched and d9_tokio the way
 * daemon/bpf_loader.c does (ring template, shared maps, uprobe_multi when
 * asked), prints one line per program: object, name, verification time
 * (us), instructions processed. Build: meson (bench/meson.build).
 * usage: bpf-verify [--multi]   (needs root) */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "d9_sched.skel.h"
#include "d9_tokio.skel.h"

#define LOG_BYTES (1u << 20)

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
        return level == LIBBPF_WARN ? vfprintf(stderr, fmt, ap) : 0;
}

static void give_logs(struct bpf_object *obj, char *bufs)
{
        struct bpf_program *p;
        size_t i = 0;

        bpf_object__for_each_program(p, obj) {
                bpf_program__set_log_level(p, 4);
                bpf_program__set_log_buf(p, bufs + i++ * LOG_BYTES, LOG_BYTES);
        }
}

static void print_stats(const char *what, struct bpf_object *obj)
{
        struct bpf_program *p;

        bpf_object__for_each_program(p, obj) {
                size_t len;
                const char *log = bpf_program__log_buf(p, &len);
                const char *t = log ? strstr(log, "verification time") : NULL;
                const char *n = log ? strstr(log, "processed ") : NULL;

                if (!bpf_program__autoload(p))
                        continue;
                printf("%-8s %-24s %8ld us %9ld insns\n", what, bpf_program__name(p),
                       t ? strtol(t + strlen("verification time"), NULL, 10) : -1L,
                       n ? strtol(n + strlen("processed "), NULL, 10) : -1L);
        }
}

int main(int argc, char **argv)
{
        bool multi = argc > 1 && !strcmp(argv[1], "--multi");
        char *bufs = calloc(64, LOG_BYTES);
        struct d9_sched *s;
        struct d9_tokio *t;
        struct bpf_program *p;
        int ring, r;

        libbpf_set_print(quiet);
        ring = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "d9_ring_tmpl", 0, 0, 1 << 20, NULL);
        if (!bufs || ring < 0 || !(s = d9_sched__open()) || !(t = d9_tokio__open()))
                return fprintf(stderr, "bpf-verify: cannot open the BPF objects\n"), 1;
        bpf_map__set_inner_map_fd(s->maps.d9_rings, ring);
        bpf_map__set_inner_map_fd(t->maps.d9_rings, ring);
        give_logs(s->obj, bufs);
        if ((r = d9_sched__load(s)) < 0)
                return fprintf(stderr, "bpf-verify: d9_sched: %s\n", strerror(-r)), 1;
        print_stats("d9_sched", s->obj);
        bpf_map__reuse_fd(t->maps.d9_targets, bpf_map__fd(s->maps.d9_targets));
        bpf_map__reuse_fd(t->maps.d9_rings, bpf_map__fd(s->maps.d9_rings));
        bpf_map__reuse_fd(t->maps.d9_drops, bpf_map__fd(s->maps.d9_drops));
        bpf_map__reuse_fd(t->maps.d9_threads, bpf_map__fd(s->maps.d9_threads));
        if (multi)
                bpf_object__for_each_program(p, t->obj)
                        bpf_program__set_expected_attach_type(p, BPF_TRACE_UPROBE_MULTI);
        give_logs(t->obj, bufs + 32ull * LOG_BYTES);
        if ((r = d9_tokio__load(t)) < 0)
                return fprintf(stderr, "bpf-verify: d9_tokio: %s\n", strerror(-r)), 1;
        print_stats("d9_tokio", t->obj);
        d9_tokio__destroy(t);
        d9_sched__destroy(s);
        return 0;
}
