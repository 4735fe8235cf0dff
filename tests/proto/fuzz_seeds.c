/* Writes the fuzzer's seed corpus at build time: the worked examples, a
 * file with every field type and annotation frames, slices of dial9's
 * fixture, and compressed variants. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "d9proto.h"

static const char *dir;

static int save(const char *name, const uint8_t *p, size_t n)
{
        char path[4096];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "wb");
        if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
                fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
                exit(1);
        }
        return 0;
}

static size_t examples(uint8_t *out, size_t cap)
{
        static const uint64_t stack[] = { 0x55550000100aULL, 0x555500002010ULL };
        static const struct d9_kv meta[] = { { "service", "api" }, { "runtime.main", "0,1" } };
        struct d9_enc *e;
        uint32_t loc, w0, st;
        size_t n;

        d9_enc_new(&e);
        d9_enc_set_output(e, out, cap, NULL, NULL);
        d9_enc_intern_string(e, "src/main.rs:10:5", 16, &loc);
        d9_enc_intern_string(e, "w0", 2, &w0);
        d9_enc_intern_stack(e, stack, 2, &st);
        d9_enc_clock_sync(e, 5000000000ULL, 1767225600000000000ULL);
        d9_enc_segment_metadata(e, 5000000100ULL, meta, 2);
        d9_enc_poll_start(e, 5000000200ULL, 3, 1, 42, loc);
        d9_enc_poll_end(e, 5000001500ULL, 3);
        d9_enc_wake(e, 5000001600ULL, 42, 43, 3);
        d9_enc_worker_park(e, 5000001700ULL, 3, 0, 12345, 4242);
        d9_enc_worker_unpark(e, 5100001700ULL, 3, 0, 12545, 17, 4242);
        d9_enc_new_stream(e);
        d9_enc_cpu_sample(e, 5000000200ULL, 0, 4242, 0, w0, st, 3);
        d9_enc_cpu_sample(e, 5020000000ULL, 255, 4243, 1, D9_NO_ATOM, st, D9_NO_CPU);
        d9_enc_task_spawn(e, 5020000001ULL, 44, loc, true);
        d9_enc_task_terminate(e, 5020000002ULL, 44);
        d9_enc_queue_sample(e, 5020000003ULL, 7);
        d9_enc_task_dump(e, 5020000004ULL, 44, st);
        d9_enc_symbol_entry(e, 0, 0x55550000100aULL, 0, loc, 0, w0, 10);
        d9_enc_output(e, &n);
        d9_enc_free(e);
        return n;
}

static size_t all_types(uint8_t *out, size_t cap)
{
        static const struct d9_field_def f[] = {
                { "i", D9_T_I64 }, { "f", D9_T_F64 }, { "b", D9_T_BOOL }, { "s", D9_T_STRING },
                { "y", D9_T_BYTES }, { "k", D9_T_STACK }, { "m", D9_T_STRING_MAP },
                { "u8", D9_T_U8 }, { "u16", D9_T_U16 }, { "u32", 0x80 | D9_T_U32 },
                { "l", D9_T_DYN_LIST }, { "d", D9_T_DYN_MAP },
        };
        static const struct d9_schema_def def = { "AllTypesEvent", 12, f };
        static const uint64_t addrs[] = { 1, 2, 3 };
        static const struct d9_kv kv[] = { { "a", "b" } };
        struct d9_dyn_elem inner[] = { { D9_T_VARINT, { .u = 300 } }, { D9_T_STRING, { .bytes = { "x", 1 } } } };
        struct d9_dyn_elem list[] = { { D9_T_I64, { .i64 = -1 } }, { D9_T_DYN_LIST, { .dyn = { inner, 2 } } } };
        struct d9_enc_value v[12] = {
                { .i64 = -5 }, { .f64 = 1.5 }, { .b = true }, { .bytes = { "hi", 2 } },
                { .bytes = { "\x00\xff", 2 } }, { .stack = { addrs, 3 } }, { .map = { kv, 1 } },
                { .u = 255 }, { .u = 65535 }, { .present = true, .u = 7 },
                { .dyn = { list, 2 } }, { .dyn = { inner, 1 } },
        };
        struct d9_enc *e;
        size_t n;
        int h;

        d9_enc_new(&e);
        d9_enc_set_output(e, out, cap, NULL, NULL);
        h = d9_enc_declare(e, &def);
        d9_enc_event(e, h, 100, v);
        d9_enc_event(e, h, 50, v);
        d9_enc_output(e, &n);
        d9_enc_free(e);
        /* An annotation frame for type 0 (field 1 "unit" = "ns"). */
        static const uint8_t ann[] = { 0x06, 0x00, 0x01, 0x00, 0x01, 0x00, 0x04, 0x00, 'u', 'n', 'i', 't',
                                       0x02, 0x00, 0x00, 0x00, 'n', 's' };
        memcpy(out + n, ann, sizeof(ann));
        return n + sizeof(ann);
}

int main(int argc, char **argv)
{
        static uint8_t buf[1 << 16];
        uint8_t *raw, *z;
        size_t n, raw_len, zn;

        if (argc != 4) {
                fprintf(stderr, "usage: fuzz_seeds FIXTURE OUTDIR STAMP\n");
                return 2;
        }
        dir = argv[2];
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                fprintf(stderr, "fuzz_seeds: cannot create %s\n", dir);
                return 1;
        }
        n = examples(buf, sizeof(buf));
        save("examples.bin", buf, n);
        save("examples-torn.bin", buf, n - 7);
        d9_compress_buf(buf, n, D9_COMPRESS_GZIP, 0, &z, &zn);
        save("examples.bin.gz", z, zn);
        free(z);
        d9_compress_buf(buf, n, D9_COMPRESS_ZSTD, 0, &z, &zn);
        save("examples.bin.zst", z, zn);
        free(z);
        n = all_types(buf, sizeof(buf));
        save("all-types.bin", buf, n);

        if (d9_read_trace_file(argv[1], &raw, &raw_len, NULL) < 0) {
                fprintf(stderr, "fuzz_seeds: cannot read dial9 fixture %s\n", argv[1]);
                return 1;
        }
        /* First stream(s) and a slice from the symbol-table tail behind a header. */
        save("dial9-head.bin", raw, raw_len < 8192 ? raw_len : 8192);
        memcpy(buf, raw, 5);
        memcpy(buf + 5, raw + raw_len - 6000, 6000);
        save("dial9-tail.bin", buf, 6005);
        free(raw);
        FILE *stamp = fopen(argv[3], "w");

        return stamp && fclose(stamp) == 0 ? 0 : 1;
}
