/* resymbolize.c: see resymbolize.h. Two passes over the decoded segment:
 * the first collects the mapping records, the unnamed symbol entries and
 * the address labels; then each build-id's debug file is looked up once
 * (debuginfo.c's order: standard places, --debug-dir, debuginfod), and
 * the second pass copies the segment with the found names swapped in. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/symbolize/debuginfo.h"
#include "daemon/symbolize/resymbolize.h"
#include "daemon/symbolize/symbolize.h"
#include "uprobes/uprobes.h"

#define UNNAMED_PREFIX "[unnamed] "

struct rs_mapping {
        uint64_t start, end, offset, bias;
        bool has_bias;
        char *path, *build_id;
};

struct rs_name {
        char *old_text, *new_text;
        size_t old_len;
};

struct rs_module {
        char *build_id;
        char *path;                     /* the executable, as the mapping named it */
        struct symbolizer *sym;         /* NULL: no debug file */
        struct probe_plan *plan;        /* for labels, built on first need */
        bool plan_tried;
};

struct rs {
        struct rs_mapping *maps;
        size_t n_maps;
        struct rs_name *names;          /* old -> new; new NULL until named */
        size_t n_names;
        struct { uint64_t addr; size_t name; } *frames;
        size_t n_frames;
        struct { uint64_t vaddr; char *build_id; size_t name; } *labels;
        size_t n_labels;
        size_t *texts;                  /* other "[unnamed] FILE 0x..." strings (labels) */
        size_t n_texts;
        struct rs_module *mods;
        size_t n_mods;
        struct rs_name **sorted;        /* named entries by old text, for the rewrite */
        size_t n_sorted;
};

static const struct d9_value *field(const struct d9_dec_event *ev, const char *name, uint8_t base)
{
        for (uint16_t i = 0; i < ev->schema->nfields; i++)
                if (!strcmp(ev->schema->fields[i].name, name))
                        return ev->values[i].present && ev->values[i].type == base &&
                               (base != D9_T_POOLED_STRING || ev->values[i].resolved) ? &ev->values[i] : NULL;
        return NULL;
}

static char *text_of(const struct d9_value *v)
{
        return v ? strndup(v->str.p, v->str.len) : NULL;
}

static int grow(void **arr, size_t n, size_t size)
{
        /* Doubling: sizes are powers of two from 16 on. */
        if (n && (n & (n - 1)))
                return 0;
        if (n && n < 16)
                return 0;
        void *more = realloc(*arr, (n < 16 ? 16 : 2 * n) * size);
        if (!more)
                return -ENOMEM;
        *arr = more;
        return 0;
}

/* Index of a name entry for text, made on first sight. */
static ssize_t name_index(struct rs *rs, const struct d9_value *v)
{
        for (size_t i = 0; i < rs->n_names; i++)
                if (rs->names[i].old_len == v->str.len && !memcmp(rs->names[i].old_text, v->str.p, v->str.len))
                        return (ssize_t)i;
        if (grow((void **)&rs->names, rs->n_names, sizeof(*rs->names)) < 0)
                return -ENOMEM;
        char *t = text_of(v);
        if (!t)
                return -ENOMEM;
        rs->names[rs->n_names] = (struct rs_name){ t, NULL, v->str.len };
        return (ssize_t)rs->n_names++;
}

static int collect(const struct d9_dec_event *ev, void *ctx)
{
        struct rs *rs = ctx;
        const char *n = ev->schema->name;

        if (!strcmp(n, "D9MappingEvent")) {
                const struct d9_value *s = field(ev, "start", D9_T_VARINT), *e = field(ev, "end", D9_T_VARINT),
                                      *o = field(ev, "file_offset", D9_T_VARINT),
                                      *b = field(ev, "load_bias", D9_T_VARINT),
                                      *p = field(ev, "path", D9_T_POOLED_STRING),
                                      *id = field(ev, "build_id", D9_T_POOLED_STRING);
                if (!s || !e || !o || !p || !id)
                        return 0;
                if (grow((void **)&rs->maps, rs->n_maps, sizeof(*rs->maps)) < 0)
                        return -ENOMEM;
                rs->maps[rs->n_maps++] = (struct rs_mapping){
                        s->u, e->u, o->u, b ? b->u : 0, b != NULL, text_of(p), text_of(id),
                };
        } else if (!strcmp(n, "SymbolTableEntry")) {
                const struct d9_value *a = field(ev, "addr", D9_T_VARINT),
                                      *name = field(ev, "symbol_name", D9_T_POOLED_STRING);
                ssize_t i;
                if (!a || !name || name->str.len < strlen(UNNAMED_PREFIX) ||
                    memcmp(name->str.p, UNNAMED_PREFIX, strlen(UNNAMED_PREFIX)))
                        return 0;
                if ((i = name_index(rs, name)) < 0 ||
                    grow((void **)&rs->frames, rs->n_frames, sizeof(*rs->frames)) < 0)
                        return -ENOMEM;
                rs->frames[rs->n_frames].addr = a->u;
                rs->frames[rs->n_frames++].name = (size_t)i;
        } else if (!strcmp(n, "PollStartEvent") || !strcmp(n, "TaskSpawnEvent") ||
                   !strcmp(n, "D9BlockingPollEvent")) {
                const struct d9_value *l = field(ev, "spawn_loc", D9_T_POOLED_STRING);
                ssize_t i;
                if (!l || l->str.len < strlen(UNNAMED_PREFIX) || memcmp(l->str.p, UNNAMED_PREFIX, strlen(UNNAMED_PREFIX)))
                        return 0;
                if ((i = name_index(rs, l)) < 0)
                        return -ENOMEM;
                for (size_t k = 0; k < rs->n_texts; k++)
                        if (rs->texts[k] == (size_t)i)
                                return 0;
                if (grow((void **)&rs->texts, rs->n_texts, sizeof(*rs->texts)) < 0)
                        return -ENOMEM;
                rs->texts[rs->n_texts++] = (size_t)i;
        } else if (!strcmp(n, "D9TaskLabelAddrEvent")) {
                const struct d9_value *l = field(ev, "label", D9_T_POOLED_STRING),
                                      *va = field(ev, "vaddr", D9_T_VARINT),
                                      *id = field(ev, "build_id", D9_T_POOLED_STRING);
                ssize_t i;
                /* Once named, a label is no address any more. */
                if (!l || !va || !id || !id->str.len || l->str.len < 2 || memcmp(l->str.p, "0x", 2))
                        return 0;
                for (size_t k = 0; k < rs->n_labels; k++)
                        if (rs->labels[k].vaddr == va->u && strlen(rs->labels[k].build_id) == id->str.len &&
                            !memcmp(rs->labels[k].build_id, id->str.p, id->str.len))
                                return 0;
                if ((i = name_index(rs, l)) < 0 ||
                    grow((void **)&rs->labels, rs->n_labels, sizeof(*rs->labels)) < 0)
                        return -ENOMEM;
                rs->labels[rs->n_labels].vaddr = va->u;
                rs->labels[rs->n_labels].build_id = text_of(id);
                rs->labels[rs->n_labels++].name = (size_t)i;
        }
        return 0;
}

static struct rs_module *module_for(struct rs *rs, const char *build_id, const char *path)
{
        for (size_t i = 0; i < rs->n_mods; i++)
                if (!strcmp(rs->mods[i].build_id, build_id)) {
                        if (!rs->mods[i].path && path)
                                rs->mods[i].path = strdup(path);
                        return &rs->mods[i];
                }
        if (grow((void **)&rs->mods, rs->n_mods, sizeof(*rs->mods)) < 0)
                return NULL;
        struct rs_module *m = &rs->mods[rs->n_mods++];
        *m = (struct rs_module){ .build_id = strdup(build_id), .path = path ? strdup(path) : NULL };
        char *dbg = m->build_id ? uprobes_debug_file_by_build_id(m->build_id, "") : NULL;
        if (dbg) {
                m->sym = symbolizer_new_for_debug_file(dbg);
                free(dbg);
        }
        return m;
}

static void name_frames(struct rs *rs, struct resym_stats *st)
{
        for (size_t i = 0; i < rs->n_frames; i++) {
                uint64_t addr = rs->frames[i].addr, size;
                const struct rs_mapping *m = NULL;
                const char *name = NULL;

                for (size_t k = 0; k < rs->n_maps && !m; k++)
                        if (addr >= rs->maps[k].start && addr < rs->maps[k].end)
                                m = &rs->maps[k];
                if (!m || !*m->build_id) {
                        st->no_mapping += !m;
                        continue;
                }
                struct rs_module *mod = module_for(rs, m->build_id, m->path);
                if (!mod || !mod->sym)
                        continue;
                name = m->has_bias ? symbolizer_lookup_vaddr(mod->sym, addr - m->bias, &size)
                                   : symbolizer_lookup_offset(mod->sym, addr - m->start + m->offset, &size);
                struct rs_name *rn = &rs->names[rs->frames[i].name];
                if (name && !rn->new_text)
                        rn->new_text = strdup(name);
        }
}

/* "[unnamed] FILE 0xVADDR" (or "FILE offset 0xOFF") of a mapping record's
 * file: a boxed future's poll fn when its label was written. */
static void name_texts(struct rs *rs, struct resym_stats *st)
{
        for (size_t i = 0; i < rs->n_texts; i++) {
                struct rs_name *rn = &rs->names[rs->texts[i]];
                const char *file = rn->old_text + strlen(UNNAMED_PREFIX), *sp = strchr(file, ' ');
                const struct rs_mapping *m = NULL;
                unsigned long long v;
                uint64_t size;
                bool by_offset;

                if (!sp)
                        continue;
                by_offset = !strncmp(sp, " offset ", 8);
                if (sscanf(by_offset ? sp + 8 : sp + 1, "0x%llx", &v) != 1)
                        continue;
                for (size_t k = 0; k < rs->n_maps && !m; k++) {
                        const char *b = strrchr(rs->maps[k].path, '/');
                        b = b ? b + 1 : rs->maps[k].path;
                        if (strlen(b) == (size_t)(sp - file) && !memcmp(b, file, (size_t)(sp - file)) &&
                            *rs->maps[k].build_id)
                                m = &rs->maps[k];
                }
                struct rs_module *mod = m ? module_for(rs, m->build_id, m->path) : NULL;
                const char *name = !mod || !mod->sym ? NULL
                                   : by_offset ? symbolizer_lookup_offset(mod->sym, v, &size)
                                               : symbolizer_lookup_vaddr(mod->sym, v, &size);
                st->labels++;
                if (name && !rn->new_text && (rn->new_text = strdup(name)))
                        st->labels_named++;
        }
}

/* The executable behind a build-id: where it was mapped, if that file is
 * still this build, else from a debuginfod server. */
static char *executable_for(struct rs_module *mod)
{
        struct symbolizer *s = mod->path ? symbolizer_new_for_debug_file(mod->path) : NULL;
        bool same = s && symbolizer_debug_build_id(s) && !strcmp(symbolizer_debug_build_id(s), mod->build_id);

        symbolizer_free(s);
        if (same)
                return strdup(mod->path);
        return debuginfo_fetch_executable(mod->build_id);
}

/* Labels come from the planner run on the executable, which now finds
 * the debug file: the same labels an unstripped build gets. */
static void name_labels(struct rs *rs)
{
        for (size_t i = 0; i < rs->n_labels; i++) {
                const char *id = rs->labels[i].build_id;
                const char *path = NULL;

                for (size_t k = 0; k < rs->n_maps && !path; k++)
                        if (!strcmp(rs->maps[k].build_id, id))
                                path = rs->maps[k].path;
                struct rs_module *mod = module_for(rs, id, path);
                if (!mod || !mod->sym)
                        continue;
                if (!mod->plan_tried) {
                        char *exe = executable_for(mod);
                        mod->plan_tried = true;
                        if (exe && probe_plan_for_file(exe, &mod->plan, NULL) < 0)
                                mod->plan = NULL;
                        free(exe);
                }
                for (size_t p = 0; mod->plan && p < mod->plan->n_points; p++) {
                        const struct probe_point *pt = &mod->plan->points[p];
                        struct rs_name *rn = &rs->names[rs->labels[i].name];
                        if (pt->kind != PROBE_POLL || pt->vaddr != rs->labels[i].vaddr || !pt->label ||
                            !strncmp(pt->label, "0x", 2) || rn->new_text)
                                continue;
                        rn->new_text = strdup(pt->label);
                }
        }
}

static int text_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
        int c = memcmp(a, b, alen < blen ? alen : blen);

        return c ? c : (alen > blen) - (alen < blen);
}

static int name_cmp(const void *a, const void *b)
{
        const struct rs_name *x = *(struct rs_name *const *)a, *y = *(struct rs_name *const *)b;

        return text_cmp(x->old_text, x->old_len, y->old_text, y->old_len);
}

/* Called for every pool string of the segment: a binary search. */
static const char *replace(const char *text, uint32_t len, void *ctx)
{
        struct rs *rs = ctx;
        size_t lo = 0, hi = rs->n_sorted;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const struct rs_name *n = rs->sorted[mid];
                int c = text_cmp(text, len, n->old_text, n->old_len);
                if (!c)
                        return n->new_text;
                if (c < 0)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return NULL;
}

static void rs_free(struct rs *rs)
{
        for (size_t i = 0; i < rs->n_maps; i++) {
                free(rs->maps[i].path);
                free(rs->maps[i].build_id);
        }
        for (size_t i = 0; i < rs->n_names; i++) {
                free(rs->names[i].old_text);
                free(rs->names[i].new_text);
        }
        for (size_t i = 0; i < rs->n_labels; i++)
                free(rs->labels[i].build_id);
        for (size_t i = 0; i < rs->n_mods; i++) {
                free(rs->mods[i].build_id);
                free(rs->mods[i].path);
                symbolizer_free(rs->mods[i].sym);
                probe_plan_free(rs->mods[i].plan);
        }
        free(rs->maps);
        free(rs->names);
        free(rs->frames);
        free(rs->labels);
        free(rs->texts);
        free(rs->mods);
        free(rs->sorted);
}

/* The build-id to name as missing: the one whose debuginfod answer says
 * more than "no server has it" (a server handing out a file that is no
 * debug file), not a library nobody ships debug files for. */
static bool missing_says_more(const char *id, const char *named)
{
        return debuginfo_answer_kind(named) != DEBUGINFO_OTHER && debuginfo_answer_kind(id) == DEBUGINFO_OTHER;
}

int resymbolize(const uint8_t *raw, size_t len, d9_enc_flush_fn out, void *octx,
                struct resym_stats *st, const char **why)
{
        static _Thread_local char msg[192];
        struct rs rs = { 0 };
        struct d9_dec_opts opts = { .strict = false, .on_event = collect, .ctx = &rs };
        struct d9_dec_result res;
        int r;

        memset(st, 0, sizeof(*st));
        *why = "";
        r = d9_decode(raw, len, &opts, &res);
        if (r < 0) {
                snprintf(msg, sizeof(msg), "not a readable trace: %s at byte %zu",
                         res.error[0] ? res.error : strerror(-r), res.error_offset);
                *why = msg;
                rs_free(&rs);
                return r;
        }
        name_frames(&rs, st);
        name_labels(&rs);
        name_texts(&rs, st);
        st->mappings = rs.n_maps;
        st->frames = rs.n_frames;
        st->labels += rs.n_labels;
        for (size_t i = 0; i < rs.n_frames; i++)
                st->frames_named += rs.names[rs.frames[i].name].new_text != NULL;
        for (size_t i = 0; i < rs.n_labels; i++)
                st->labels_named += rs.names[rs.labels[i].name].new_text != NULL;
        st->modules = rs.n_mods;
        for (size_t i = 0; i < rs.n_mods; i++) {
                if (rs.mods[i].sym)
                        st->modules_found++;
                else if (!st->missing[0] || missing_says_more(rs.mods[i].build_id, st->missing))
                        snprintf(st->missing, sizeof(st->missing), "%s (%s)", rs.mods[i].build_id,
                                 rs.mods[i].path ? rs.mods[i].path : "?");
        }
        r = 0;
        if (st->frames_named + st->labels_named && !(rs.sorted = calloc(rs.n_names, sizeof(*rs.sorted)))) {
                *why = "out of memory";
                r = -ENOMEM;
        } else if (st->frames_named + st->labels_named) {
                for (size_t i = 0; i < rs.n_names; i++)
                        if (rs.names[i].new_text)
                                rs.sorted[rs.n_sorted++] = &rs.names[i];
                qsort(rs.sorted, rs.n_sorted, sizeof(*rs.sorted), name_cmp);
                r = d9_rewrite_strings(raw, len, replace, &rs, out, octx, &res);
                if (r < 0) {
                        snprintf(msg, sizeof(msg), "rewriting failed: %s", res.error[0] ? res.error : strerror(-r));
                        *why = msg;
                }
        }
        rs_free(&rs);
        return r;
}
