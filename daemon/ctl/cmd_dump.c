/* d9ctl dump: prints trace files (raw, .gz or .zst) through proto/'s decoder.
 * Text, --json and --summary share one decode pass; text and JSON share the
 * value printer. A corrupt file costs one line and a non-zero exit; a torn
 * tail (a segment still being written) is reported and tolerated unless
 * --strict. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "d9ctl.h"
#include "d9proto.h"
#include "trace_read.h"

enum dump_mode { DUMP_TEXT, DUMP_JSON, DUMP_SUMMARY };

struct type_count {
        char *name;
        char *signature; /* "field: Type, ..." of the first schema seen */
        uint64_t events;
};

struct dump {
        enum dump_mode mode;
        FILE *out;
        struct type_count *types;
        size_t ntypes;
        uint64_t first_ts, last_ts;
        bool any_ts;
        uint64_t untimed;       /* ts = 0 records (symbols, metadata): not in the time span */
        struct trace_symbols syms; /* names of callchain addresses, for text */
};

/* First pass of text mode: collect the names (they are appended after the
 * events that use them). */
static int on_symbol(const struct d9_dec_event *ev, void *ctx)
{
        return d9ctl_trace_symbols_add(&((struct dump *)ctx)->syms, ev);
}

static void put_value(const struct dump *d, const struct d9_value *v);

static void put_container(const struct dump *d, const struct d9_value *v)
{
        struct d9_value_iter it;
        struct d9_value el;
        bool json = d->mode == DUMP_JSON, pairs = v->type != D9_T_DYN_LIST;

        /* StringMap -> object; DynamicMap keys need not be strings -> [[k, v], ...]. */
        bool object = v->type == D9_T_STRING_MAP || !json;

        fputc(object && pairs ? '{' : '[', d->out);
        d9_value_iter_init(&it, v);
        while (d9_value_iter_next(&it, &el)) {
                bool key = pairs && (it.index % 2) == 1;

                if (it.index > 1 && (!pairs || key))
                        fputs(", ", d->out);
                if (key && !object)
                        fputc('[', d->out);
                put_value(d, &el);
                if (key)
                        fputs(object ? (json ? ": " : "=") : ", ", d->out);
                else if (pairs && !object)
                        fputc(']', d->out);
        }
        fputc(object && pairs ? '}' : ']', d->out);
}

static void put_value(const struct dump *d, const struct d9_value *v)
{
        bool json = d->mode == DUMP_JSON;

        if (!v->present) {
                fputs(json ? "null" : "-", d->out);
                return;
        }
        if ((v->type == D9_T_POOLED_STRING || v->type == D9_T_POOLED_STACK) && !v->resolved) {
                fprintf(d->out, json ? "\"<unresolved pool#%" PRIu32 ">\"" : "<unresolved pool#%" PRIu32 ">",
                        v->pool_id);
                return;
        }
        switch (v->type) {
        case D9_T_I64:
                fprintf(d->out, "%" PRId64, v->i64);
                break;
        case D9_T_F64:
                if (json && !isfinite(v->f64))
                        fputs("null", d->out);
                else
                        fprintf(d->out, "%.17g", v->f64);
                break;
        case D9_T_BOOL:
                fputs(v->b ? "true" : "false", d->out);
                break;
        case D9_T_STRING:
        case D9_T_POOLED_STRING:
                d9ctl_trace_json_string(d->out, v->str.p, v->str.len);
                break;
        case D9_T_BYTES:
                fputc('"', d->out);
                for (uint32_t i = 0; i < v->str.len; i++)
                        fprintf(d->out, "%02x", (unsigned char)v->str.p[i]);
                fputc('"', d->out);
                break;
        case D9_T_STACK:
        case D9_T_POOLED_STACK:
                fputc('[', d->out);
                /* JSON keeps addresses (its readers join SymbolTableEntry
                 * themselves); text names the frames the file names. */
                for (uint32_t i = 0; i < v->stack.n; i++) {
                        uint64_t a = d9_value_stack_addr(v, i);
                        const char *name = json ? NULL : d9ctl_trace_symbols_name(&d->syms, a);

                        if (name)
                                fprintf(d->out, "%s%s", i ? ", " : "", name);
                        else
                                fprintf(d->out, json ? "%s\"0x%" PRIx64 "\"" : "%s0x%" PRIx64, i ? ", " : "", a);
                }
                fputc(']', d->out);
                break;
        case D9_T_STRING_MAP:
        case D9_T_DYN_LIST:
        case D9_T_DYN_MAP:
                put_container(d, v);
                break;
        default:
                fprintf(d->out, "%" PRIu64, v->u);
        }
}

static void print_event(const struct dump *d, const struct d9_dec_event *ev)
{
        const struct d9_dec_schema *s = ev->schema;
        bool json = d->mode == DUMP_JSON;

        if (json) {
                fputs("{\"event\":", d->out);
                d9ctl_trace_json_string(d->out, s->name, strlen(s->name));
                if (ev->has_timestamp)
                        fprintf(d->out, ",\"ts\":%" PRIu64, ev->ts);
                fputs(",\"fields\":{", d->out);
        } else {
                fprintf(d->out, "%" PRIu64 " %s", ev->ts, s->name);
        }
        for (uint16_t i = 0; i < s->nfields; i++) {
                if (json) {
                        fputs(i ? "," : "", d->out);
                        d9ctl_trace_json_string(d->out, s->fields[i].name, strlen(s->fields[i].name));
                        fputc(':', d->out);
                } else {
                        fprintf(d->out, " %s=", s->fields[i].name);
                }
                put_value(d, &ev->values[i]);
        }
        fputs(json ? "}}\n" : "\n", d->out);
}

static struct type_count *type_lookup(struct dump *d, const struct d9_dec_schema *s)
{
        for (size_t i = 0; i < d->ntypes; i++)
                if (strcmp(d->types[i].name, s->name) == 0)
                        return &d->types[i];
        struct type_count *t = realloc(d->types, (d->ntypes + 1) * sizeof(*t));
        size_t len = 1;

        if (!t)
                return NULL;
        d->types = t;
        t = &d->types[d->ntypes];
        for (uint16_t i = 0; i < s->nfields; i++)
                len += strlen(s->fields[i].name) + 32;
        *t = (struct type_count){ .name = strdup(s->name), .signature = calloc(1, len) };
        if (!t->name || !t->signature) {
                free(t->name);
                free(t->signature);
                return NULL;
        }
        for (uint16_t i = 0; i < s->nfields; i++)
                sprintf(t->signature + strlen(t->signature), "%s%s: %s%s", i ? ", " : "",
                        s->fields[i].name, (s->fields[i].type & D9_T_OPTIONAL) ? "Optional " : "",
                        d9_type_name(s->fields[i].type));
        d->ntypes++;
        return t;
}

static int on_schema(const struct d9_dec_schema *s, void *ctx)
{
        struct dump *d = ctx;

        return d->mode == DUMP_SUMMARY && !type_lookup(d, s) ? -ENOMEM : 0;
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        struct dump *d = ctx;

        if (d->mode != DUMP_SUMMARY) {
                print_event(d, ev);
                return 0;
        }
        struct type_count *t = type_lookup(d, ev->schema);

        if (!t)
                return -ENOMEM;
        t->events++;
        if (ev->has_timestamp && ev->ts == 0) {
                d->untimed++; /* dial9 writes symbols (and we metadata) at ts 0 */
        } else if (ev->has_timestamp) {
                if (!d->any_ts || ev->ts < d->first_ts)
                        d->first_ts = ev->ts;
                if (!d->any_ts || ev->ts > d->last_ts)
                        d->last_ts = ev->ts;
                d->any_ts = true;
        }
        return 0;
}

static void print_summary(struct dump *d, const char *path, size_t len, enum d9_compress kind,
                          const struct d9_dec_result *res)
{
        static const char *const kinds[] = { "raw", "gzip", "zstd" };

        fprintf(d->out, "%s: %s, %zu bytes decoded, %u streams, %" PRIu64 " frames, %" PRIu64 " events\n",
                path, kinds[kind], len, res->streams, res->frames, res->events);
        if (d->any_ts)
                fprintf(d->out, "time: %" PRIu64 " .. %" PRIu64 " ns (%.3f s)%s\n", d->first_ts,
                        d->last_ts, (double)(d->last_ts - d->first_ts) / 1e9,
                        d->untimed ? ", not counting the ts=0 records" : "");
        fprintf(d->out, "schemas:\n");
        for (size_t i = 0; i < d->ntypes; i++)
                fprintf(d->out, "  %s { %s }\n", d->types[i].name, d->types[i].signature);
        fprintf(d->out, "events:\n");
        for (size_t i = 0; i < d->ntypes; i++)
                fprintf(d->out, "  %10" PRIu64 "  %s\n", d->types[i].events, d->types[i].name);
}

static void dump_reset(struct dump *d)
{
        for (size_t i = 0; i < d->ntypes; i++) {
                free(d->types[i].name);
                free(d->types[i].signature);
        }
        free(d->types);
        d->types = NULL;
        d->ntypes = 0;
        d->any_ts = false;
        d->untimed = 0;
        d9ctl_trace_symbols_clear(&d->syms);
}

static int dump_file(struct dump *d, const char *path, bool strict)
{
        struct d9_dec_opts opts = { .strict = strict, .on_event = on_event, .on_schema = on_schema, .ctx = d };
        struct d9_dec_result res;
        enum d9_compress kind;
        uint8_t *buf;
        size_t len;
        char why[4200];
        int r = d9ctl_trace_load(path, &buf, &len, &kind, why, sizeof(why));

        if (r < 0) {
                fprintf(stderr, "d9ctl: %s\n", why);
                return 1;
        }
        if (d->mode == DUMP_TEXT) {
                struct d9_dec_opts first = { .strict = false, .on_event = on_symbol, .ctx = d };

                /* A damaged file is reported by the printing pass below;
                 * the names read up to the damage still apply. */
                (void)d9_decode(buf, len, &first, &res);
                d9ctl_trace_symbols_sort(&d->syms);
                fprintf(d->out, "# %s\n", path);
        }
        r = d9_decode(buf, len, &opts, &res);
        fflush(d->out);
        if (r == -EBADMSG)
                fprintf(stderr, "d9ctl: %s: corrupt trace at offset %zu: %s\n", path, res.error_offset, res.error);
        else if (r < 0)
                fprintf(stderr, "d9ctl: %s: %s\n", path, strerror(-r));
        else if (res.truncated)
                fprintf(stderr, "d9ctl: %s: torn tail at offset %zu ignored (%zu bytes; segment still being written?)\n",
                        path, res.error_offset, len - res.consumed);
        if (r == 0 && d->mode == DUMP_SUMMARY)
                print_summary(d, path, len, kind, &res);
        dump_reset(d);
        free(buf);
        return r < 0;
}

int d9ctl_cmd_dump(int argc, char **argv)
{
        static const struct option opts[] = {
                { "summary", no_argument, NULL, 's' },
                { "json", no_argument, NULL, 'j' },
                { "strict", no_argument, NULL, 'S' },
                {},
        };
        struct dump d = { .mode = DUMP_TEXT, .out = stdout };
        bool strict = false;
        int opt, failed = 0;

        while ((opt = getopt_long(argc, argv, "sj", opts, NULL)) != -1) {
                switch (opt) {
                case 's':
                        d.mode = DUMP_SUMMARY;
                        break;
                case 'j':
                        d.mode = DUMP_JSON;
                        break;
                case 'S':
                        strict = true;
                        break;
                default:
                        fprintf(stderr, "usage: d9ctl dump [--summary | --json] [--strict] FILE...|DIR...\n");
                        return 2;
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "d9ctl: dump: no trace file given (usage: d9ctl dump [--summary | --json] FILE...)\n");
                return 2;
        }
        for (int i = optind; i < argc; i++) {
                char **paths = NULL, why[512];
                size_t n = 0;

                if (d9ctl_trace_paths_add(argv[i], &paths, &n, why, sizeof(why)) < 0) {
                        fprintf(stderr, "d9ctl: %s\n", why);
                        failed = 1;
                }
                for (size_t k = 0; k < n; k++)
                        failed |= dump_file(&d, paths[k], strict);
                d9ctl_trace_paths_free(paths, n);
        }
        return failed ? 1 : 0;
}
