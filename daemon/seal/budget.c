/* budget.c: disk budget over every target folder under <state>/traces.
 * Oldest = earliest mtime (the seal time), ties broken by path so the
 * order is stable. Every eviction is logged. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/seal/budget.h"
#include "daemon/core/log.h"
#include "daemon/core/segment_name.h"

struct sealed_file {
        char *path;
        uint64_t size;
        struct timespec mtime;
};

/* nftw has no context argument; the sealer thread is the only caller. */
static struct {
        struct sealed_file *v;
        size_t n, cap;
} scan;

static int is_sealed_name(const char *name)
{
        size_t n = strlen(name);

        if (d9d_segment_index_of(name) < 0)
                return 0;
        return (n > 4 && !strcmp(name + n - 4, ".bin")) || (n > 8 && !strcmp(name + n - 8, ".bin.zst")) ||
               (n > 7 && !strcmp(name + n - 7, ".bin.gz"));
}

static int scan_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        if (type != FTW_F || !is_sealed_name(path + ftw->base))
                return 0;
        if (scan.n == scan.cap) {
                struct sealed_file *more = realloc(scan.v, (scan.cap = scan.cap ? scan.cap * 2 : 256) * sizeof(*more));
                if (!more)
                        return -1;
                scan.v = more;
        }
        scan.v[scan.n++] = (struct sealed_file){ strdup(path), (uint64_t)st->st_size, st->st_mtim };
        return 0;
}

static int older_first(const void *a, const void *b)
{
        const struct sealed_file *x = a, *y = b;

        if (x->mtime.tv_sec != y->mtime.tv_sec)
                return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
        if (x->mtime.tv_nsec != y->mtime.tv_nsec)
                return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
        return strcmp(x->path, y->path);
}

int seal_budget_enforce(const char *traces_dir, uint64_t budget_bytes, struct budget_result *res)
{
        uint64_t total = 0;
        int r = 0;

        memset(res, 0, sizeof(*res));
        scan.n = 0;
        if (nftw(traces_dir, scan_one, 16, FTW_PHYS) < 0)
                r = -errno;
        for (size_t i = 0; i < scan.n; i++)
                total += scan.v[i].size;
        res->total_bytes = total;
        qsort(scan.v, scan.n, sizeof(*scan.v), older_first);
        for (size_t i = 0; i < scan.n && total > budget_bytes; i++) {
                if (unlink(scan.v[i].path) < 0) {
                        log_warn("disk budget: cannot evict %s: %s", scan.v[i].path, strerror(errno));
                        continue;
                }
                total -= scan.v[i].size;
                res->evicted++;
                res->evicted_bytes += scan.v[i].size;
                log_info("disk budget: evicted %s (%llu bytes; %llu of %llu bytes used)", scan.v[i].path,
                         (unsigned long long)scan.v[i].size, (unsigned long long)total,
                         (unsigned long long)budget_bytes);
        }
        for (size_t i = 0; i < scan.n; i++)
                free(scan.v[i].path);
        scan.n = 0;
        return r;
}
