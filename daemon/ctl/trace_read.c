/* trace_read.c: see trace_read.h. */
#include "trace_read.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int d9ctl_trace_load(const char *path, uint8_t **buf, size_t *len, enum d9_compress *kind, char *why,
               size_t why_len)
{
        enum d9_compress own;
        int e = d9_read_trace_file(path, buf, len, kind ? kind : &own);

        if (e == -EBADMSG || e == -EPIPE)
                snprintf(why, why_len, "%s: corrupt or truncated %s data, cannot decompress", path,
                         *(kind ? kind : &own) == D9_COMPRESS_GZIP ? "gzip" : "zstd");
        else if (e == -EFBIG)
                snprintf(why, why_len,
                         "%s: expands to more than %ux its size (at least %zu MiB): not a trace segment, "
                         "not decompressed",
                         path, D9_DECOMPRESS_RATIO, D9_DECOMPRESS_MIN_CAP >> 20);
        else if (e < 0)
                snprintf(why, why_len, "%s: cannot read: %s", path, strerror(-e));
        return e;
}

int d9ctl_trace_decode(const char *path, const uint8_t *buf, size_t len, const struct d9_dec_opts *opts,
                 struct d9_dec_result *res, char *why, size_t why_len)
{
        struct d9_dec_result own = { 0 };
        int e;

        res = res ? res : &own;
        e = d9_decode(buf, len, opts, res);
        if (e == -EBADMSG)
                snprintf(why, why_len, "%s: corrupt trace at offset %zu: %s", path, res->error_offset,
                         res->error);
        else if (e < 0)
                snprintf(why, why_len, "%s: %s", path, strerror(-e));
        return e;
}

static int is_trace_name(const char *n)
{
        static const char *const ends[] = { ".bin", ".bin.gz", ".bin.zst" };
        size_t len = strlen(n);

        for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
                size_t e = strlen(ends[i]);
                if (len > e && !strcmp(n + len - e, ends[i]))
                        return 1;
        }
        return 0;
}

static int path_cmp(const void *a, const void *b)
{
        return strverscmp(*(char *const *)a, *(char *const *)b);
}

static int push(char ***paths, size_t *n, char *p)
{
        char **more = p ? realloc(*paths, (*n + 1) * sizeof(**paths)) : NULL;

        if (!more) {
                free(p);
                return -ENOMEM;
        }
        *paths = more;
        (*paths)[(*n)++] = p;
        return 0;
}

/* Appends the trace files directly in dir, in version order; how many. */
static int dir_traces(const char *dir, char ***paths, size_t *n, char *why, size_t why_len)
{
        DIR *d = opendir(dir);
        if (!d) {
                int e = -errno;
                snprintf(why, why_len, "%s: %s", dir, strerror(-e));
                return e;
        }
        size_t first = *n;
        struct dirent *de;
        int e = 0;
        while (!e && (de = readdir(d)))
                if (is_trace_name(de->d_name)) {
                        char *p = NULL;
                        e = asprintf(&p, "%s/%s", dir, de->d_name) < 0 ? -ENOMEM : push(paths, n, p);
                }
        closedir(d);
        if (e == -ENOMEM) {
                snprintf(why, why_len, "%s: out of memory", dir);
                return e;
        }
        d9ctl_trace_paths_sort(*paths + first, *n - first);
        return (int)(*n - first);
}

/* `record --out DIR` and d9d's trace directory put a recording's segments
 * in SERVICE/INSTANCE under it: the directories at most that deep below
 * dir that hold trace files, collected in dirs. Symbolic links are not
 * followed (a trace directory can be another user's). */
#define RECORDING_DIR_DEPTH 2

static int recording_dirs(const char *dir, int depth, char ***dirs, size_t *n)
{
        DIR *d = opendir(dir);
        struct dirent *de;
        bool holds = false;
        int e = 0;

        if (!d)
                return errno == ENOMEM ? -ENOMEM : 0;
        while (!e && (de = readdir(d))) {
                struct stat st;
                char *sub = NULL;

                if (is_trace_name(de->d_name)) {
                        holds = true;
                        continue;
                }
                if (!depth || de->d_name[0] == '.' ||
                    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
                        continue;
                if (asprintf(&sub, "%s/%s", dir, de->d_name) < 0)
                        e = -ENOMEM;
                else
                        e = recording_dirs(sub, depth - 1, dirs, n);
                free(sub);
        }
        closedir(d);
        if (!e && holds && depth < RECORDING_DIR_DEPTH)
                e = push(dirs, n, strdup(dir));
        return e;
}

int d9ctl_trace_paths_add(const char *arg, char ***paths, size_t *n, char *why, size_t why_len)
{
        struct stat st;
        char **dirs = NULL;
        size_t ndirs = 0;
        int e;

        if (stat(arg, &st) != 0 || !S_ISDIR(st.st_mode))
                return push(paths, n, strdup(arg));
        e = dir_traces(arg, paths, n, why, why_len);
        if (e != 0)
                return e < 0 ? e : 0;
        e = recording_dirs(arg, RECORDING_DIR_DEPTH, &dirs, &ndirs);
        if (e < 0)
                snprintf(why, why_len, "%s: out of memory", arg);
        else if (ndirs == 1) {
                int found = dir_traces(dirs[0], paths, n, why, why_len);
                e = found < 0 ? found : 0;
        } else if (ndirs == 0) {
                snprintf(why, why_len,
                         "%s: no trace files (*.bin, *.bin.gz, *.bin.zst) in it, nor in SERVICE/INSTANCE below it", arg);
                e = -ENOENT;
        } else {
                d9ctl_trace_paths_sort(dirs, ndirs);
                snprintf(why, why_len, "%s: holds %zu recordings (%s, %s%s): name one's directory", arg, ndirs,
                         dirs[0], dirs[1], ndirs > 2 ? ", ..." : "");
                e = -EINVAL;
        }
        d9ctl_trace_paths_free(dirs, ndirs);
        return e;
}

void d9ctl_trace_paths_sort(char **paths, size_t n)
{
        qsort(paths, n, sizeof(*paths), path_cmp);
}

void d9ctl_trace_paths_free(char **paths, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(paths[i]);
        free(paths);
}

const struct d9_value *d9ctl_trace_field(const struct d9_dec_event *ev, const char *name)
{
        for (uint16_t i = 0; i < ev->schema->nfields; i++)
                if (!strcmp(ev->schema->fields[i].name, name))
                        return ev->values[i].present ? &ev->values[i] : NULL;
        return NULL;
}

uint64_t d9ctl_trace_field_u(const struct d9_dec_event *ev, const char *name)
{
        const struct d9_value *v = d9ctl_trace_field(ev, name);

        return v ? v->u : 0;
}

int d9ctl_trace_metadata_value(const struct d9_dec_event *ev, const char *key, struct d9_value *value)
{
        const struct d9_value *m = strcmp(ev->schema->name, "SegmentMetadataEvent") ? NULL
                                                                                   : d9ctl_trace_field(ev, "entries");
        size_t len = strlen(key);
        struct d9_value_iter it;
        struct d9_value k;

        if (!m)
                return 0;
        d9_value_iter_init(&it, m);
        while (d9_value_iter_next(&it, &k) && d9_value_iter_next(&it, value))
                if (k.str.len == len && !memcmp(k.str.p, key, len))
                        return 1;
        return 0;
}

void d9ctl_trace_recording_file(struct trace_recording *r)
{
        r->file_begun = false;
}

enum trace_recording_step d9ctl_trace_recording_event(struct trace_recording *r, const struct d9_dec_event *ev)
{
        const char *name = ev->schema->name;
        struct d9_value v;

        if (r->file_begun || !strcmp(name, "ClockSyncEvent") || !strcmp(name, D9_SPAN_EVENT))
                return TRACE_RECORDING_INSIDE;
        r->file_begun = true;
        /* Out of memory reads as no name: a new recording, nothing joined
         * wrongly. */
        char *key = d9ctl_trace_metadata_value(ev, "recording", &v) ? strndup(v.str.p, v.str.len) : NULL;
        if (key && r->key && !strcmp(key, r->key)) {
                free(key);
                return TRACE_RECORDING_GOES_ON;
        }
        free(r->key);
        r->key = key;
        return TRACE_RECORDING_NEW;
}

void d9ctl_trace_recording_clear(struct trace_recording *r)
{
        free(r->key);
        r->key = NULL;
}

int d9ctl_trace_symbols_add(struct trace_symbols *t, const struct d9_dec_event *ev)
{
        if (strcmp(ev->schema->name, "SymbolTableEntry"))
                return 0;
        const struct d9_value *addr = d9ctl_trace_field(ev, "addr"), *name = d9ctl_trace_field(ev, "symbol_name");
        if (!addr || !name || !name->resolved || d9ctl_trace_field_u(ev, "inline_depth"))
                return 0;
        if (t->n == t->cap) {
                size_t cap = t->cap ? t->cap * 2 : 256;
                struct trace_symbol *v = realloc(t->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                t->v = v;
                t->cap = cap;
        }
        char *s = strndup(name->str.p, name->str.len);
        if (!s)
                return -ENOMEM;
        t->v[t->n++] = (struct trace_symbol){ addr->u, s };
        return 0;
}

static int symbol_cmp(const void *a, const void *b)
{
        const struct trace_symbol *x = a, *y = b;

        return x->addr < y->addr ? -1 : x->addr > y->addr;
}

void d9ctl_trace_symbols_sort(struct trace_symbols *t)
{
        if (t->n)
                qsort(t->v, t->n, sizeof(*t->v), symbol_cmp);
}

const char *d9ctl_trace_symbols_name(const struct trace_symbols *t, uint64_t addr)
{
        if (!t->n)
                return NULL;
        struct trace_symbol key = { .addr = addr };
        const struct trace_symbol *s = bsearch(&key, t->v, t->n, sizeof(key), symbol_cmp);
        return s ? s->name : NULL;
}

void d9ctl_trace_symbols_clear(struct trace_symbols *t)
{
        for (size_t i = 0; i < t->n; i++)
                free(t->v[i].name);
        free(t->v);
        *t = (struct trace_symbols){ 0 };
}

static int collect_symbol(const struct d9_dec_event *ev, void *ctx)
{
        return d9ctl_trace_symbols_add(ctx, ev);
}

int d9ctl_trace_read_with_symbols(const char *path, struct trace_symbols *syms,
                            int (*on_event)(const struct d9_dec_event *ev, void *ctx), void *ctx,
                            char *why, size_t why_len)
{
        struct d9_dec_opts names = { .strict = false, .on_event = collect_symbol, .ctx = syms };
        struct d9_dec_opts events = { .strict = false, .on_event = on_event, .ctx = ctx };
        struct d9_dec_result res;
        uint8_t *buf;
        size_t len;
        int e = d9ctl_trace_load(path, &buf, &len, NULL, why, why_len);

        if (e < 0)
                return e;
        d9ctl_trace_symbols_clear(syms);
        /* A damage is reported by the second pass; names before it count. */
        e = d9_decode(buf, len, &names, &res) == -ENOMEM ? -ENOMEM : 0;
        d9ctl_trace_symbols_sort(syms);
        if (e)
                snprintf(why, why_len, "%s: out of memory", path);
        else
                e = d9ctl_trace_decode(path, buf, len, &events, NULL, why, why_len);
        free(buf);
        return e;
}

void d9ctl_trace_json_chars(FILE *out, const char *p, size_t len)
{
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)p[i];

                if (c == '"' || c == '\\')
                        fprintf(out, "\\%c", c);
                else if (c == '\n')
                        fputs("\\n", out);
                else if (c < 0x20 || c == 0x7f)
                        fprintf(out, "\\u%04x", c);
                else
                        fputc(c, out);
        }
}

void d9ctl_trace_json_string(FILE *out, const char *p, size_t len)
{
        fputc('"', out);
        d9ctl_trace_json_chars(out, p, len);
        fputc('"', out);
}
