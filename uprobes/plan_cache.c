/* plan_cache: plans of executables planned before, for the next process
 * running the same file. A service's replicas, restarts and every process
 * an auto-attach rule matches run one binary: planning it again costs
 * 15 ms to several seconds of the planner thread (a vtable scan of the
 * whole file), a copy of the plan a fraction of a millisecond, which keeps
 * exec -> attach short.
 *
 * An entry is keyed by the file's identity and change marks (device,
 * inode, size, mtime, ctime): any write to the file changes its ctime, and
 * nobody can set a ctime back, so a file changed since it was planned is
 * planned again, and so is one written while it was planned (its ctime
 * then differs from planned_ctime). A plan that used a separate debug file
 * is never kept: that file was found under the target's root or a debug
 * directory, which its user may control, and its symbols must not decide
 * where another user's process gets its probes. The copy gets the new
 * process's own executable fd
 * (uprobes_target_exe_open: pidfd checked), so uprobes attach to the inode that
 * process runs, as for a plan built from scratch. Not thread-safe: one
 * owner (d9d's loop). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "uprobes/uprobes_int.h"

struct plan_key {
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime, ctime;
};

struct plan_cache_entry {
        struct plan_key key;
        struct probe_plan *plan;        /* exe_fd -1: no file held */
        uint64_t last_used;
};

struct probe_plan_cache {
        struct plan_cache_entry *v;
        unsigned n;
        uint64_t clock;
};

static int plan_key_of(int fd, struct plan_key *k)
{
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        *k = (struct plan_key){ st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim };
        return 0;
}

static bool plan_key_eq(const struct plan_key *a, const struct plan_key *b)
{
        return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
               a->mtime.tv_nsec == b->mtime.tv_nsec && a->ctime.tv_sec == b->ctime.tv_sec &&
               a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static int dup_str(char **dst, const char *src)
{
        *dst = src ? strdup(src) : NULL;
        return src && !*dst ? -ENOMEM : 0;
}

static int dup_mem(void **dst, const void *src, size_t n, size_t size)
{
        *dst = n ? malloc(n * size) : NULL;
        if (n && !*dst)
                return -ENOMEM;
        if (n)
                memcpy(*dst, src, n * size);
        return 0;
}

/* Everything but the file: exe_fd -1, attach_path NULL. */
static int plan_copy(const struct probe_plan *src, struct probe_plan **out)
{
        struct probe_plan *p = malloc(sizeof(*p));
        int r = 0;

        if (!p)
                return -ENOMEM;
        *p = *src;
        p->exe_fd = -1;
        p->attach_path = p->exe_path = p->build_id = p->tokio_version = p->shape = p->debug_file = NULL;
        p->points = calloc(src->n_points ? src->n_points : 1, sizeof(*p->points));
        p->missing = calloc(src->n_missing ? src->n_missing : 1, sizeof(*p->missing));
        p->n_points = p->n_missing = 0;
        p->segments = NULL;
        p->dyn_fns = NULL;
        p->dyn_fn_text = NULL;
        p->harness_sites = NULL;
        if (!p->points || !p->missing)
                r = -ENOMEM;
        if (r == 0)
                r = dup_mem((void **)&p->segments, src->segments, src->n_segments, sizeof(*src->segments)) ?:
                    dup_mem((void **)&p->dyn_fns, src->dyn_fns, src->n_dyn_fns, sizeof(*src->dyn_fns)) ?:
                    dup_mem((void **)&p->dyn_fn_text, src->dyn_fn_text, src->dyn_fn_text_len, 1) ?:
                    dup_mem((void **)&p->harness_sites, src->harness_sites, src->n_harness_sites,
                            sizeof(*src->harness_sites));
        for (size_t i = 0; r == 0 && i < src->n_points; i++) {
                struct probe_point *d = &p->points[p->n_points++];
                const struct probe_point *s = &src->points[i];

                *d = *s;
                d->label = d->skip_reason = d->insn_desc = d->note = NULL;
                r = dup_str(&d->label, s->label) ?: dup_str(&d->skip_reason, s->skip_reason) ?:
                    dup_str(&d->insn_desc, s->insn_desc) ?: dup_str(&d->note, s->note);
        }
        for (size_t i = 0; r == 0 && i < src->n_missing; i++) {
                p->missing[p->n_missing].kind = src->missing[i].kind;
                r = dup_str(&p->missing[p->n_missing++].reason, src->missing[i].reason);
        }
        if (r == 0)
                r = dup_str(&p->exe_path, src->exe_path) ?: dup_str(&p->build_id, src->build_id) ?:
                    dup_str(&p->tokio_version, src->tokio_version) ?: dup_str(&p->shape, src->shape) ?:
                    dup_str(&p->debug_file, src->debug_file);
        if (r < 0) {
                probe_plan_free(p);
                return r;
        }
        *out = p;
        return 0;
}

struct probe_plan_cache *probe_plan_cache_new(unsigned capacity)
{
        struct probe_plan_cache *c = calloc(1, sizeof(*c));

        if (c && !(c->v = calloc(capacity, sizeof(*c->v)))) {
                free(c);
                return NULL;
        }
        if (c)
                c->n = capacity;
        return c;
}

void probe_plan_cache_free(struct probe_plan_cache *c)
{
        if (!c)
                return;
        for (unsigned i = 0; i < c->n; i++)
                probe_plan_free(c->v[i].plan);
        free(c->v);
        free(c);
}

void probe_plan_cache_put(struct probe_plan_cache *c, const struct probe_plan *plan)
{
        struct plan_cache_entry *slot = NULL;
        struct plan_key k;

        if (!c || plan->exe_fd < 0 || plan->debug_file || plan_key_of(plan->exe_fd, &k) < 0 ||
            k.ctime.tv_sec != plan->planned_ctime.tv_sec || k.ctime.tv_nsec != plan->planned_ctime.tv_nsec)
                return;
        for (unsigned i = 0; i < c->n; i++) {
                struct plan_cache_entry *e = &c->v[i];

                if (e->plan && plan_key_eq(&e->key, &k))
                        return;
                if (!slot || !e->plan || (slot->plan && e->last_used < slot->last_used))
                        slot = e;
        }
        if (!slot)
                return;
        probe_plan_free(slot->plan);
        slot->plan = NULL;
        if (plan_copy(plan, &slot->plan) == 0) {
                slot->key = k;
                slot->last_used = ++c->clock;
        }
}

int probe_plan_cache_get(struct probe_plan_cache *c, int pidfd, pid_t pid, struct probe_plan **out)
{
        _cleanup_free_ char *display = NULL;
        struct probe_plan *p = NULL;
        struct plan_key k;
        int fd, r;

        if (!c)
                return -ENOENT;
        fd = uprobes_target_exe_open(pidfd, pid, &display, NULL);
        if (fd < 0)
                return fd;
        r = plan_key_of(fd, &k);
        for (unsigned i = 0; r == 0 && i < c->n; i++) {
                struct plan_cache_entry *e = &c->v[i];

                if (!e->plan || !plan_key_eq(&e->key, &k))
                        continue;
                e->last_used = ++c->clock;
                r = plan_copy(e->plan, &p);
                break;
        }
        if (r == 0 && !p)
                r = -ENOENT;
        if (r == 0) {
                free(p->exe_path);
                p->exe_path = display;
                display = NULL;
                p->exe_fd = fd;
                p->elapsed_ms = 0;
                if (asprintf(&p->attach_path, "/proc/self/fd/%d", fd) < 0) {
                        p->attach_path = NULL;
                        r = -ENOMEM;
                }
        }
        if (r < 0) {
                if (p)
                        probe_plan_free(p);     /* closes fd */
                else
                        close(fd);
                return r;
        }
        *out = p;
        return 0;
}
