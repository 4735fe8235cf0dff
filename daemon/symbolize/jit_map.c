/* jit_map.c: see jit_map.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "proto/d9proto.h"
#include "daemon/symbolize/jit_map.h"
#include "uprobes/uprobes.h"

/* A busy V8 writes a few MB an hour; past this the rest is not read. */
#define JIT_MAP_MAX_BYTES (64u << 20)
#define JIT_MAP_MAX_NAME 512
/* How far back a lookup walks over entries starting at or below addr to
 * find one that holds it: overlaps come from recompiled code only. */
#define JIT_MAP_BACK 16

struct jit_entry {
        uint64_t start, end;
        size_t line;            /* later lines win */
        char *name;
};

struct jit_map {
        struct jit_entry *e;
        size_t n;
};

static int by_start(const void *a, const void *b)
{
        const struct jit_entry *x = a, *y = b;

        if (x->start != y->start)
                return x->start < y->start ? -1 : 1;
        return x->line < y->line ? -1 : x->line > y->line;
}

/* One "START SIZE NAME" line (hex, without 0x as perf expects it), its
 * newline already cut off. */
static bool parse_line(const char *line, struct jit_entry *out)
{
        char *end;
        uint64_t start = strtoull(line, &end, 16), size;

        if (end == line || *end != ' ')
                return false;
        line = end + 1;
        size = strtoull(line, &end, 16);
        if (end == line || *end != ' ' || !size || start + size < start || !end[1])
                return false;
        if (!(out->name = strndup(end + 1, JIT_MAP_MAX_NAME)))
                return false;
        out->start = start;
        out->end = start + size;
        return true;
}

static int parse(char *text, struct jit_map *m)
{
        size_t line_no = 0;

        for (char *line = text; *line; line_no++) {
                char *nl = strchr(line, '\n');
                if (nl)
                        *nl = 0;
                struct jit_entry e = { .line = line_no };
                if (parse_line(line, &e)) {
                        struct jit_entry *more = realloc(m->e, (m->n + 1) * sizeof(*more));
                        if (!more) {
                                free(e.name);
                                return -ENOMEM;
                        }
                        m->e = more;
                        m->e[m->n++] = e;
                }
                if (!nl)
                        break;
                line = nl + 1;
        }
        qsort(m->e, m->n, sizeof(*m->e), by_start);
        return 0;
}

int jit_map_load(int root_fd, pid_t nspid, uid_t owner, struct jit_map **out)
{
        char rel[64];
        struct stat st;

        *out = NULL;
        snprintf(rel, sizeof(rel), "tmp/perf-%d.map", (int)nspid);
        _cleanup_close_ int fd = d9_target_file_openat(root_fd, rel, true);
        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (st.st_uid != owner && st.st_uid != 0)
                return -EPERM;
        size_t want = (uint64_t)st.st_size < JIT_MAP_MAX_BYTES ? (size_t)st.st_size : JIT_MAP_MAX_BYTES;
        _cleanup_free_ char *text = malloc(want + 1);
        if (!text)
                return -ENOMEM;
        /* Unreadable: nothing named from it, as for an empty map. */
        ssize_t got = d9_read_full(fd, text, want, 0);
        size_t have = got > 0 ? (size_t)got : 0;
        /* A line still being written at the end is dropped, not half read. */
        while (have && text[have - 1] != '\n')
                have--;
        text[have] = 0;
        struct jit_map *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        int r = parse(text, m);
        if (r < 0) {
                jit_map_free(m);
                return r;
        }
        *out = m;
        return 0;
}

const char *jit_map_lookup(const struct jit_map *m, uint64_t addr)
{
        size_t lo = 0, hi = m ? m->n : 0;
        const struct jit_entry *best = NULL;

        /* The first entry starting above addr. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (m->e[mid].start <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        for (size_t i = lo, k = 0; i > 0 && k < JIT_MAP_BACK; i--, k++) {
                const struct jit_entry *e = &m->e[i - 1];
                if (addr < e->end && (!best || e->line > best->line))
                        best = e;
        }
        return best ? best->name : NULL;
}

size_t jit_map_count(const struct jit_map *m)
{
        return m ? m->n : 0;
}

void jit_map_free(struct jit_map *m)
{
        if (!m)
                return;
        for (size_t i = 0; i < m->n; i++)
                free(m->e[i].name);
        free(m->e);
        free(m);
}
