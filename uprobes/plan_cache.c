/* plan_cache.c: probe plans kept per executable file, so that attaching to
 * a program again, or to another process running it, skips planning (1-4 s
 * of copying, vtable scans and code decoding for a 300 MB binary).
 *
 * The key is the file's identity: device, inode, size, mtime and ctime
 * (ctime changes with every write and no unprivileged user can set it), so
 * a changed file is planned again. A plan that used a separate debug file is
 * never kept: that file was found under the target's root, which a user
 * controls, and its symbols must not decide where another user's process
 * gets its probes. A few plans are kept (about 1 MiB each for 7,000
 * points), the least recently used goes first. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "uprobes_int.h"
#include "uprobes.h"

#define PLAN_CACHE_MAX 4

struct cached_plan {
        struct stat st;
        struct probe_plan *plan;        /* exe_fd -1, no attach_path */
        uint64_t used;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cached_plan cache[PLAN_CACHE_MAX];
static uint64_t cache_clock;

static bool same_file(const struct stat *a, const struct stat *b)
{
        return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
               a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
               a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int dup_str(char **dst, const char *src)
{
        *dst = src ? strdup(src) : NULL;
        return src && !*dst ? -ENOMEM : 0;
}

/* A deep copy, without the file (exe_fd -1, attach_path NULL). */
static struct probe_plan *plan_clone(const struct probe_plan *src)
{
        struct probe_plan *p = calloc(1, sizeof(*p));
        int r = 0;

        if (!p)
                return NULL;
        *p = *src;
        p->exe_fd = -1;
        p->attach_path = p->exe_path = p->build_id = p->tokio_version = p->shape = p->debug_file = NULL;
        p->points = NULL;
        p->missing = NULL;
        p->n_points = p->n_missing = 0;
        r |= dup_str(&p->exe_path, src->exe_path) | dup_str(&p->build_id, src->build_id) |
             dup_str(&p->tokio_version, src->tokio_version) | dup_str(&p->shape, src->shape) |
             dup_str(&p->debug_file, src->debug_file);
        p->points = calloc(src->n_points ? src->n_points : 1, sizeof(*p->points));
        p->missing = calloc(src->n_missing ? src->n_missing : 1, sizeof(*p->missing));
        if (r || !p->points || !p->missing) {
                probe_plan_free(p);
                return NULL;
        }
        for (size_t i = 0; i < src->n_points; i++, p->n_points++) {
                const struct probe_point *s = &src->points[i];
                struct probe_point *d = &p->points[i];

                *d = *s;
                d->label = d->skip_reason = d->insn_desc = d->note = NULL;
                r |= dup_str(&d->label, s->label) | dup_str(&d->skip_reason, s->skip_reason) |
                     dup_str(&d->insn_desc, s->insn_desc) | dup_str(&d->note, s->note);
        }
        for (size_t i = 0; i < src->n_missing; i++, p->n_missing++) {
                p->missing[i] = src->missing[i];
                r |= dup_str(&p->missing[i].reason, src->missing[i].reason);
        }
        if (r) {
                probe_plan_free(p);
                return NULL;
        }
        return p;
}

struct probe_plan *plan_cache_take(int fd, const char *path)
{
        struct probe_plan *hit = NULL;
        struct stat st;

        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return NULL;
        pthread_mutex_lock(&cache_lock);
        for (size_t i = 0; i < PLAN_CACHE_MAX && !hit; i++) {
                if (cache[i].plan && same_file(&cache[i].st, &st)) {
                        cache[i].used = ++cache_clock;
                        hit = plan_clone(cache[i].plan);
                }
        }
        pthread_mutex_unlock(&cache_lock);
        if (!hit)
                return NULL;
        free(hit->exe_path);
        hit->exe_path = strdup(path);
        if (!hit->exe_path || asprintf(&hit->attach_path, "/proc/self/fd/%d", fd) < 0) {
                hit->attach_path = NULL;
                probe_plan_free(hit);
                return NULL;
        }
        hit->exe_fd = fd;
        hit->from_cache = true;
        return hit;
}

void plan_cache_put(const struct stat *planned, const struct probe_plan *plan)
{
        struct stat now;
        struct probe_plan *copy;
        size_t victim = 0;

        /* Changed while it was planned: the plan may mix both versions. */
        if (plan->debug_file || plan->exe_fd < 0 || fstat(plan->exe_fd, &now) < 0 ||
            !S_ISREG(now.st_mode) || !same_file(planned, &now) || !(copy = plan_clone(plan)))
                return;
        pthread_mutex_lock(&cache_lock);
        for (size_t i = 0; i < PLAN_CACHE_MAX; i++) {
                if (!cache[i].plan || same_file(&cache[i].st, &now)) {
                        victim = i;
                        break;
                }
                if (cache[i].used < cache[victim].used)
                        victim = i;
        }
        probe_plan_free(cache[victim].plan);
        cache[victim] = (struct cached_plan){ now, copy, ++cache_clock };
        pthread_mutex_unlock(&cache_lock);
}
