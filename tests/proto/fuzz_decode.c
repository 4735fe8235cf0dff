/* libFuzzer target for the decoder: any input (raw, or gzip/zstd by magic)
 * must decode without memory errors, leaks or hangs, in strict and lenient
 * mode, and the decoder's own claims must hold: the valid prefix it reports
 * is itself a cleanly decodable file. */
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t sink;

static void touch(const struct d9_value *v)
{
        struct d9_value_iter it;
        struct d9_value el;

        if (!v->present)
                return;
        switch (v->type) {
        case D9_T_STRING:
        case D9_T_BYTES:
        case D9_T_POOLED_STRING:
                for (uint32_t i = 0; v->resolved && i < v->str.len; i++)
                        sink += (uint8_t)v->str.p[i];
                break;
        case D9_T_STACK:
        case D9_T_POOLED_STACK:
                for (uint32_t i = 0; v->resolved && i < v->stack.n; i++)
                        sink += d9_value_stack_addr(v, i);
                break;
        case D9_T_STRING_MAP:
        case D9_T_DYN_LIST:
        case D9_T_DYN_MAP:
                d9_value_iter_init(&it, v);
                while (d9_value_iter_next(&it, &el))
                        touch(&el);
                break;
        default:
                sink += v->u;
        }
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        sink += ev->ts + strlen(ev->schema->name);
        for (uint16_t i = 0; i < ev->schema->nfields; i++)
                touch(&ev->values[i]);
        return 0;
}

static int on_schema(const struct d9_dec_schema *s, void *ctx)
{
        for (uint32_t i = 0; i < s->nannotations; i++)
                sink += strlen(s->annotations[i].key) + strlen(s->annotations[i].value);
        return 0;
}

static void check(const uint8_t *buf, size_t len)
{
        struct d9_dec_opts strict = { .strict = true, .on_event = on_event, .on_schema = on_schema };
        struct d9_dec_opts lenient = { .on_event = on_event, .on_schema = on_schema };
        struct d9_dec_result res, again;
        size_t prefix;

        d9_decode(buf, len, &strict, &res);
        if (res.consumed > len || res.error_offset > len)
                abort();
        d9_decode(buf, len, &lenient, &res);
        prefix = d9_valid_prefix_len(buf, len);
        if (prefix != res.consumed || prefix > len)
                abort();
        /* Trimming to the valid prefix (crash recovery) must give a file that
         * decodes completely, with no torn tail. */
        if (prefix > 0 &&
            (d9_decode(buf, prefix, &lenient, &again) != 0 || again.truncated || again.consumed != prefix))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        uint8_t *raw;
        size_t raw_len;

        check(data, size);
        if (d9_compress_detect(data, size) != D9_COMPRESS_NONE &&
            d9_decompress(data, size, 1 << 24, &raw, &raw_len) == 0) {
                check(raw, raw_len);
                free(raw);
        }
        return 0;
}
