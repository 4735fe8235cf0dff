/* mapping.c: see mapping.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/symbolize/mapping.h"
#include "uprobes/uprobes.h"

bool maps_exec_line(const char *line, struct maps_line *m)
{
        char perms[8];
        int path_at = 0;

        if (sscanf(line, "%llx-%llx %7s %llx %*s %*u %n", &m->start, &m->end, perms, &m->offset, &path_at) != 4 ||
            !path_at || perms[2] != 'x' ||
            (line[path_at] != '/' && strncmp(line + path_at, "[vdso]\n", 7) && strcmp(line + path_at, "[vdso]")))
                return false;
        const char *nl = strchr(line + path_at, '\n');
        m->path = line + path_at;
        m->path_len = nl ? (size_t)(nl - m->path) : strlen(m->path);
        return true;
}

const struct probe_segment *mapping_segment(const struct probe_segment *segs, size_t n, uint64_t off,
                                            uint64_t len)
{
        const struct probe_segment *any = NULL;

        for (size_t j = 0; j < n; j++) {
                const struct probe_segment *s = &segs[j];

                if (s->offset >= off + len || s->offset + s->filesz <= off)
                        continue;
                if (s->exec)
                        return s;
                any = any ? any : s;
        }
        return any;
}

void mapping_unnamed(char *buf, size_t n, const char *path, bool bias_known, uint64_t vaddr_or_offset)
{
        const char *base = strrchr(path, '/');

        snprintf(buf, n, bias_known ? "[unnamed] %s 0x%llx" : "[unnamed] %s offset 0x%llx", base ? base + 1 : path,
                 (unsigned long long)vaddr_or_offset);
}

/* Does the map's path (path_len bytes) name exe, deleted since or not? */
static bool path_is(const char *path, size_t path_len, const char *exe, size_t exe_len)
{
        static const char deleted[] = " (deleted)";

        return (path_len == exe_len || (path_len == exe_len + sizeof(deleted) - 1 &&
                                        !memcmp(path + exe_len, deleted, sizeof(deleted) - 1))) &&
               !memcmp(path, exe, exe_len);
}

static void exe_map_add(struct exe_map *out, const struct maps_line *m, const struct probe_segment *segs,
                        size_t n_segs)
{
        const struct probe_segment *s = mapping_segment(segs, n_segs, m->offset, m->end - m->start);
        size_t base = m->path_len;

        if (out->n == EXE_MAP_RANGES)
                return;
        out->r[out->n++] = (struct exe_range){
                .start = m->start, .end = m->end, .offset = m->offset, .bias_known = s != NULL,
                .bias = s ? m->start - m->offset + s->offset - s->vaddr : 0,
        };
        while (base && m->path[base - 1] != '/')
                base--;
        snprintf(out->file, sizeof(out->file), "%.*s", (int)(m->path_len - base), m->path + base);
}

/* Only the lines holding exe's path are parsed: a JVM's or V8's map has
 * 100k lines, and this runs where the map lands, on the drain loop. */
int exe_map_from_maps(const char *maps_text, const char *exe, const struct probe_segment *segs, size_t n_segs,
                      struct exe_map *out)
{
        size_t exe_len = exe ? strlen(exe) : 0;

        memset(out, 0, sizeof(*out));
        for (const char *at = exe_len ? strstr(maps_text ? maps_text : "", exe) : NULL; at;
             at = strstr(at + exe_len, exe)) {
                const char *line = at;
                struct maps_line m;

                while (line > maps_text && line[-1] != '\n')
                        line--;
                if (maps_exec_line(line, &m) && m.path == at && path_is(m.path, m.path_len, exe, exe_len))
                        exe_map_add(out, &m, segs, n_segs);
        }
        return out->n ? 0 : -ENOENT;
}

int exe_map_from_code_start(uint64_t start_code, const char *file, const struct probe_segment *segs,
                            size_t n_segs, struct exe_map *out)
{
        const char *base = file ? strrchr(file, '/') : NULL;
        uint64_t lowest = UINT64_MAX, bias;

        memset(out, 0, sizeof(*out));
        for (size_t i = 0; i < n_segs; i++)
                if (segs[i].exec && segs[i].vaddr < lowest)
                        lowest = segs[i].vaddr;
        if (lowest == UINT64_MAX || start_code < lowest)
                return -ENOENT;
        bias = start_code - lowest;
        for (size_t i = 0; i < n_segs && out->n < EXE_MAP_RANGES; i++)
                if (segs[i].exec)
                        out->r[out->n++] = (struct exe_range){
                                .start = segs[i].vaddr + bias, .end = segs[i].vaddr + segs[i].filesz + bias,
                                .offset = segs[i].offset, .bias_known = true, .bias = bias,
                        };
        snprintf(out->file, sizeof(out->file), "%s", base ? base + 1 : file ? file : "");
        return 0;
}

bool exe_map_same(const struct exe_map *a, const struct exe_map *b)
{
        if (a->n != b->n || strcmp(a->file, b->file))
                return false;
        for (size_t i = 0; i < a->n; i++)
                if (a->r[i].start != b->r[i].start || a->r[i].end != b->r[i].end ||
                    a->r[i].offset != b->r[i].offset || a->r[i].bias_known != b->r[i].bias_known ||
                    a->r[i].bias != b->r[i].bias)
                        return false;
        return true;
}

static const struct exe_range *exe_range_at(const struct exe_map *m, uint64_t addr)
{
        for (size_t i = 0; i < m->n; i++)
                if (addr >= m->r[i].start && addr < m->r[i].end)
                        return &m->r[i];
        return NULL;
}

bool exe_map_vaddr(const struct exe_map *m, uint64_t addr, uint64_t *vaddr)
{
        const struct exe_range *r = exe_range_at(m, addr);

        if (!r || !r->bias_known)
                return false;
        *vaddr = addr - r->bias;
        return true;
}

bool exe_map_bias(const struct exe_map *m, uint64_t *bias)
{
        for (size_t i = 0; i < m->n; i++)
                if (m->r[i].bias_known) {
                        *bias = m->r[i].bias;
                        return true;
                }
        return false;
}

bool exe_map_unnamed(const struct exe_map *m, uint64_t addr, char *buf, size_t n)
{
        const struct exe_range *r = exe_range_at(m, addr);

        if (!r)
                return false;
        mapping_unnamed(buf, n, m->file, r->bias_known, r->bias_known ? addr - r->bias : addr - r->start + r->offset);
        return true;
}
