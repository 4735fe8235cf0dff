/* kallsyms.c: one sorted table of the kernel's text symbols per d9d.
 *
 * Reading and sorting /proc/kallsyms costs ~100 ms of CPU (the kernel
 * formats ~120k lines), which every sealed segment used to pay. Kernel text
 * only moves when modules load or unload, so the table is read once, on a
 * thread of its own when d9d starts, kept for d9d's life (≈ 4.5 MiB for
 * 120k symbols), keyed by a hash of /proc/modules, and rebuilt when that
 * changes. BPF programs loaded after the table was read (by other tools)
 * stay unnamed until the next rebuild. Readers hold a reference, so a
 * rebuild never frees a table under a sealer that is using it. The drain
 * loop never reads the file: it takes the table only once it is there. */
#include "daemon/symbolize/kallsyms.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/cleanup.h"
#include "daemon/symbolize/symbolize.h"

struct ksym {
        uint64_t addr;
        uint32_t name;          /* offset into names */
};

struct ksyms {
        struct ksym *syms;
        size_t n;
        char *names;
        uint64_t modules_hash;
        unsigned refs;          /* the cache's own counts as one */
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ksyms *cache;
static bool preloading;         /* the preload thread runs */
static bool preload_failed;     /* it found no table: do not start it again */

/* FNV-1a of /proc/modules: names, sizes and load addresses of modules. */
static uint64_t modules_hash(void)
{
        _cleanup_free_ char *text = symbolizer_read_proc_text("/proc/modules");
        uint64_t h = 1469598103934665603ull;

        for (const char *p = text ? text : ""; *p; p++)
                h = (h ^ (unsigned char)*p) * 1099511628211ull;
        return h;
}

static int ksym_cmp(const void *a, const void *b)
{
        const struct ksym *x = a, *y = b;
        return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void ksyms_free(struct ksyms *k)
{
        if (!k)
                return;
        free(k->syms);
        free(k->names);
        free(k);
}

/* Text symbols ('t'/'T') with real addresses; names kept in one arena. */
static struct ksyms *ksyms_read(uint64_t hash)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/kallsyms", "re");
        struct ksyms *k = calloc(1, sizeof(*k));
        size_t cap = 0, names_len = 0, names_cap = 0;
        char line[512];

        if (!f || !k) {
                free(k);
                return NULL;
        }
        k->modules_hash = hash;
        while (fgets(line, sizeof(line), f)) {
                unsigned long long addr;
                char type, name[256];

                if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr ||
                    (type != 't' && type != 'T'))
                        continue;
                size_t len = strlen(name) + 1;
                if (k->n == cap) {
                        struct ksym *more = realloc(k->syms, (cap = cap ? cap * 2 : 65536) * sizeof(*more));
                        if (!more)
                                goto fail;
                        k->syms = more;
                }
                if (names_len + len > names_cap) {
                        char *more = realloc(k->names, names_cap = (names_cap ? names_cap * 2 : 1u << 21));
                        if (!more)
                                goto fail;
                        k->names = more;
                }
                if (names_len + len > UINT32_MAX)
                        goto fail;
                memcpy(k->names + names_len, name, len);
                k->syms[k->n++] = (struct ksym){ addr, (uint32_t)names_len };
                names_len += len;
        }
        if (k->n == 0)
                goto fail;
        /* Held for d9d's life: give back the doubling's slack. */
        struct ksym *fit = realloc(k->syms, k->n * sizeof(*fit));
        char *names_fit = realloc(k->names, names_len);
        if (fit)
                k->syms = fit;
        if (names_fit)
                k->names = names_fit;
        qsort(k->syms, k->n, sizeof(*k->syms), ksym_cmp);
        return k;
fail:
        ksyms_free(k);
        return NULL;
}

static void put_locked(struct ksyms *k)
{
        if (k && --k->refs == 0)
                ksyms_free(k);
}

struct ksyms *ksyms_get(void)
{
        uint64_t hash = modules_hash();
        struct ksyms *k;

        pthread_mutex_lock(&cache_lock);
        if (!cache || cache->modules_hash != hash) {
                struct ksyms *fresh = ksyms_read(hash);
                if (cache)
                        put_locked(cache);
                cache = fresh;
                if (cache)
                        cache->refs = 1;
        }
        k = cache;
        if (k)
                k->refs++;
        pthread_mutex_unlock(&cache_lock);
        return k;
}

static void *preload_run(void *arg)
{
        struct ksyms *k = ksyms_get();

        ksyms_put(k);
        pthread_mutex_lock(&cache_lock);
        preloading = false;
        preload_failed = !k;
        pthread_mutex_unlock(&cache_lock);
        return arg;
}

/* Caller holds cache_lock. */
static void preload_start_locked(void)
{
        pthread_attr_t attr;
        pthread_t th;

        if (preloading || preload_failed)
                return;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        preloading = pthread_create(&th, &attr, preload_run, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (preloading)
                pthread_setname_np(th, "d9d-kallsyms");
}

struct ksyms *ksyms_get_ready(void)
{
        struct ksyms *k;

        /* Held while someone reads the file: not worth waiting for. */
        if (pthread_mutex_trylock(&cache_lock) != 0)
                return NULL;
        k = cache;
        if (k)
                k->refs++;
        else
                preload_start_locked();
        pthread_mutex_unlock(&cache_lock);
        return k;
}

void ksyms_put(struct ksyms *k)
{
        pthread_mutex_lock(&cache_lock);
        put_locked(k);
        pthread_mutex_unlock(&cache_lock);
}

const char *ksyms_lookup(const struct ksyms *k, uint64_t addr)
{
        size_t lo = 0, hi = k ? k->n : 0;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (k->syms[mid].addr <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo ? k->names + k->syms[lo - 1].name : NULL;
}
