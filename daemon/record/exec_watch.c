/* exec_watch.c: the user side of bpf/d9_exec.bpf.c. Why BPF and not the
 * proc connector: the connector is a netlink socket of the initial network
 * namespace (a d9d in a pod's netns hears nothing) that reports pids of the
 * initial pid namespace, and it loses messages on a full socket buffer
 * without saying which; the tracepoint hands us the pid in d9d's own
 * namespace, counts what a full ring lost, and d9d already loads BPF. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/d9_events.h"
#include "d9_exec.skel.h"
#include "daemon/core/d9d.h"
#include "daemon/record/exec_watch.h"

struct exec_watch {
        struct d9_watch w;
        struct d9d *d;
        struct d9_exec *skel;
        struct ring_buffer *ring;
        exec_watch_fn fn;
        void *ctx;
        uint64_t invisible;
};

static int on_exec_rec(void *ctx, void *data, size_t size)
{
        struct exec_watch *ew = ctx;
        const struct d9_exec_rec *r = data;

        if (size < sizeof(*r))
                return 0;
        if (!r->pid) {
                ew->invisible++;
                return 0;
        }
        ew->fn(ew->ctx, (pid_t)r->pid, r->ts);
        return 0;
}

static void on_exec_ring(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct exec_watch *ew = (struct exec_watch *)w;

        ring_buffer__consume(ew->ring);
}

void exec_watch_stop(struct exec_watch *ew)
{
        if (!ew)
                return;
        if (ew->w.fd >= 0 && ew->d)
                d9d_watch_del(ew->d, &ew->w);
        ring_buffer__free(ew->ring);
        d9_exec__destroy(ew->skel);
        free(ew);
}

int exec_watch_start(struct d9d *d, exec_watch_fn fn, void *ctx, struct exec_watch **out)
{
        struct exec_watch *ew = calloc(1, sizeof(*ew));
        struct stat ns;
        int r;

        if (!ew)
                return -ENOMEM;
        ew->w = (struct d9_watch){ .fd = -1, .fn = on_exec_ring, .first = true };
        ew->fn = fn;
        ew->ctx = ctx;
        if (stat("/proc/self/ns/pid", &ns) < 0) {
                r = -errno;
                goto fail;
        }
        ew->skel = d9_exec__open();
        if (!ew->skel) {
                r = -errno;
                goto fail;
        }
        ew->skel->rodata->d9_pidns_ino = (uint32_t)ns.st_ino;
        r = d9_exec__load(ew->skel);
        if (r == 0)
                r = d9_exec__attach(ew->skel);
        if (r < 0)
                goto fail;
        ew->ring = ring_buffer__new(bpf_map__fd(ew->skel->maps.d9_exec_ring), on_exec_rec, ew, NULL);
        if (!ew->ring) {
                r = -errno;
                goto fail;
        }
        ew->w.fd = ring_buffer__epoll_fd(ew->ring);
        r = d9d_watch_add(d, &ew->w, EPOLLIN);
        if (r < 0) {
                ew->w.fd = -1;
                goto fail;
        }
        ew->d = d;
        *out = ew;
        return 0;
fail:
        exec_watch_stop(ew);
        return r < 0 ? r : -EIO;
}

uint64_t exec_watch_lost(const struct exec_watch *ew)
{
        int ncpu = libbpf_num_possible_cpus();
        uint32_t zero = 0;
        uint64_t sum = 0;

        if (ncpu <= 0)
                return 0;
        uint64_t per_cpu[ncpu];
        if (bpf_map_lookup_elem(bpf_map__fd(ew->skel->maps.d9_exec_lost), &zero, per_cpu) < 0)
                return 0;
        for (int i = 0; i < ncpu; i++)
                sum += per_cpu[i];
        return sum;
}

uint64_t exec_watch_invisible(const struct exec_watch *ew)
{
        return ew->invisible;
}
