/* d9_rewrite_strings (what d9ctl symbolize writes): on dial9's fixture and
 * on a trace of our own with several streams and multi-entry pools,
 * replacing nothing gives back the same bytes; replacing some strings
 * changes exactly those texts wherever events use them (across streams),
 * keeps every event, pool id and non-pool frame, and a torn tail is cut at
 * the last whole frame. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"
#include "../tap.h"

struct buf {
        uint8_t *p;
        size_t len, cap;
};

static int put(void *ctx, const uint8_t *d, size_t n)
{
        struct buf *b = ctx;

        if (b->len + n > b->cap) {
                b->cap = (b->len + n) * 2;
                b->p = realloc(b->p, b->cap);
                if (!b->p)
                        return -ENOMEM;
        }
        memcpy(b->p + b->len, d, n);
        b->len += n;
        return 0;
}

/* Every event's name and its string values (pooled ones resolved), one
 * line each: equal summaries mean equal events. */
struct summary {
        struct buf text;
        uint64_t events, unresolved;
};

static int summarize(const struct d9_dec_event *ev, void *ctx)
{
        struct summary *s = ctx;
        char line[64];

        s->events++;
        snprintf(line, sizeof(line), "%s@%llu:", ev->schema->name, (unsigned long long)ev->ts);
        put(&s->text, (const uint8_t *)line, strlen(line));
        for (uint16_t i = 0; i < ev->schema->nfields; i++) {
                const struct d9_value *v = &ev->values[i];
                if (!v->present)
                        continue;
                if (v->type == D9_T_POOLED_STRING || v->type == D9_T_STRING) {
                        s->unresolved += v->type == D9_T_POOLED_STRING && !v->resolved;
                        put(&s->text, (const uint8_t *)v->str.p, v->str.len);
                } else if (v->type == D9_T_POOLED_STACK || v->type == D9_T_STACK) {
                        snprintf(line, sizeof(line), "[%u]", v->stack.n);
                        put(&s->text, (const uint8_t *)line, strlen(line));
                } else {
                        snprintf(line, sizeof(line), "%llu", (unsigned long long)v->u);
                        put(&s->text, (const uint8_t *)line, strlen(line));
                }
                put(&s->text, (const uint8_t *)"|", 1);
        }
        put(&s->text, (const uint8_t *)"\n", 1);
        return 0;
}

static int summary_of(const uint8_t *p, size_t n, struct summary *s)
{
        struct d9_dec_opts o = { .strict = true, .on_event = summarize, .ctx = s };
        struct d9_dec_result res;

        memset(s, 0, sizeof(*s));
        return d9_decode(p, n, &o, &res);
}

static const char *nothing(const char *t, uint32_t n, void *ctx)
{
        return NULL;
}

/* "old-N" -> "renamed-N-and-longer", everything else kept. */
static const char *rename_old(const char *t, uint32_t n, void *ctx)
{
        static char out[64];

        if (n < 4 || memcmp(t, "old-", 4) || n > 20)
                return NULL;
        snprintf(out, sizeof(out), "renamed-%.*s-and-longer", (int)n - 4, t + 4);
        return out;
}

/* Two streams; the second re-defines the strings; one pool frame with
 * several entries (the encoder emits one per string, so build it by hand
 * at the end: a third stream). */
static int build(struct buf *out)
{
        static uint8_t ebuf[4096];
        struct d9_enc *enc;
        uint32_t a[3];
        int r = d9_enc_new(&enc);

        if (r < 0)
                return r;
        d9_enc_set_output(enc, ebuf, sizeof(ebuf), put, out);
        for (int s = 0; s < 2 && !r; s++) {
                r = d9_enc_new_stream(enc);
                r = r ? r : d9_enc_intern_string(enc, "old-a", 5, &a[0]);
                r = r ? r : d9_enc_intern_string(enc, "keep-b", 6, &a[1]);
                r = r ? r : d9_enc_intern_string(enc, "old-c", 5, &a[2]);
                for (int i = 0; i < 50 && !r; i++)
                        r = d9_enc_poll_start(enc, 1000000 + (uint64_t)s * 100000 + (uint64_t)i, 0, 0,
                                              (uint64_t)i, a[i % 3]);
        }
        r = r ? r : d9_enc_flush(enc);
        d9_enc_free(enc);
        /* Stream 3 by hand: a three-entry pool frame, then a PollStartEvent
         * naming entry 2. */
        static const uint8_t tail[] = {
                'T', 'R', 'C', 0, 1,
                3, 3, 0, 0, 0,
                0, 0, 0, 0, 5, 0, 0, 0, 'o', 'l', 'd', '-', 'x',
                1, 0, 0, 0, 1, 0, 0, 0, 'k',
                2, 0, 0, 0, 5, 0, 0, 0, 'o', 'l', 'd', '-', 'y',
                1, 0, 0, 14, 0, 'P', 'o', 'l', 'l', 'S', 't', 'a', 'r', 't', 'E', 'v', 'e', 'n', 't', 1, 4, 0,
                9, 0, 'w', 'o', 'r', 'k', 'e', 'r', '_', 'i', 'd', 9,
                11, 0, 'l', 'o', 'c', 'a', 'l', '_', 'q', 'u', 'e', 'u', 'e', 11,
                7, 0, 't', 'a', 's', 'k', '_', 'i', 'd', 9,
                9, 0, 's', 'p', 'a', 'w', 'n', '_', 'l', 'o', 'c', 7,
                2, 0, 0, 5, 0, 0, 1, 0, 7, 2, 0, 0, 0,
        };
        return r ? r : put(out, tail, sizeof(tail));
}

int main(int argc, char **argv)
{
        struct buf own = { 0 }, same = { 0 }, renamed = { 0 }, cut = { 0 };
        struct summary s0, s1;
        struct d9_dec_result res;
        uint8_t *fix = NULL;
        size_t fix_len = 0;

        if (argc < 2)
                bail("usage: test_rewrite FIXTURE");
        if (d9_read_trace_file(argv[1], &fix, &fix_len, NULL) < 0)
                bail("cannot read %s", argv[1]);
        struct buf fx = { 0 };
        ok(d9_rewrite_strings(fix, fix_len, nothing, NULL, put, &fx, &res) == 0 && fx.len == fix_len &&
           !memcmp(fx.p, fix, fix_len), "dial9 fixture, nothing replaced: the same %zu bytes", fix_len);

        ok(build(&own) == 0, "own trace built (%zu bytes, 3 streams)", own.len);
        ok(d9_rewrite_strings(own.p, own.len, nothing, NULL, put, &same, &res) == 0 && same.len == own.len &&
           !memcmp(same.p, own.p, own.len), "own trace, nothing replaced: the same bytes");
        ok(d9_rewrite_strings(own.p, own.len, rename_old, NULL, put, &renamed, &res) == 0 &&
           renamed.len == own.len + 6 * 15, "renaming 6 pool entries grows the file by their added text (%zu)",
           renamed.len - own.len);
        ok(summary_of(own.p, own.len, &s0) == 0 && summary_of(renamed.p, renamed.len, &s1) == 0 &&
           s0.events == 101 && s1.events == s0.events && !s1.unresolved,
           "every event decodes from the rewritten trace (%llu, strict, all pool ids resolve)",
           (unsigned long long)s1.events);
        /* Expected: the original summary with the texts renamed. */
        struct buf want = { 0 };
        for (size_t i = 0; i < s0.text.len;) {
                if (i + 4 <= s0.text.len && !memcmp(s0.text.p + i, "old-", 4)) {
                        char t[32];
                        snprintf(t, sizeof(t), "renamed-%c-and-longer", s0.text.p[i + 4]);
                        put(&want, (const uint8_t *)t, strlen(t));
                        i += 5;
                } else {
                        put(&want, s0.text.p + i, 1);
                        i++;
                }
        }
        ok(want.len == s1.text.len && !memcmp(want.p, s1.text.p, want.len),
           "the events are the same but for the renamed texts, in every stream");
        ok(d9_rewrite_strings(own.p, own.len - 3, rename_old, NULL, put, &cut, &res) == 0 && res.truncated &&
           cut.len == renamed.len - 13, "a torn tail is dropped, the whole frames before it kept");
        uint8_t bad[] = { 'T', 'R', 'C', 0, 1, 0x77 };
        struct buf junk = { 0 };
        ok(d9_rewrite_strings(bad, sizeof(bad), nothing, NULL, put, &junk, &res) == -EBADMSG && res.error[0],
           "corrupt input: -EBADMSG with a reason (%s)", res.error);
        free(fix);
        free(fx.p);
        free(own.p);
        free(same.p);
        free(renamed.p);
        free(cut.p);
        free(want.p);
        free(junk.p);
        free(s0.text.p);
        free(s1.text.p);
        return tap_done();
}
