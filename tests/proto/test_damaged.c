/* Damaged input: a file cut at any byte decodes leniently up to its last
 * whole frame (what crash recovery trims to) and fails strictly with that
 * offset; corrupt bytes are reported at their offset with a reason; gzip
 * (single and multi-member) and zstd input is recognised by magic, and the
 * compression helpers write what the readers expect. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "d9proto.h"
#include "../tap.h"

static uint8_t ex[512];
static size_t ex_len;
/* Frame boundaries of the 10.1 example (header, pool, schema, reset, event, schema, event). */
static const size_t bounds[] = { 0x05, 0x22, 0x68, 0x71, 0x7e, 0x9e, 0xa5 };

static void make_example(void)
{
        struct d9_enc *e;
        uint32_t loc;

        d9_enc_new(&e);
        d9_enc_set_output(e, ex, sizeof(ex), NULL, NULL);
        d9_enc_intern_string(e, "src/main.rs:10:5", 16, &loc);
        d9_enc_poll_start(e, 1000000000, 3, 0, 42, loc);
        d9_enc_poll_end(e, 1000001500, 3);
        d9_enc_output(e, &ex_len);
        d9_enc_free(e);
}

static size_t boundary_below(size_t cut)
{
        size_t b = 0;

        for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++)
                if (bounds[i] <= cut)
                        b = bounds[i];
        return b;
}

static void truncation_at_every_byte(void)
{
        struct d9_dec_opts strict = { .strict = true }, lenient = { 0 };
        struct d9_dec_result res;
        int bad_lenient = 0, bad_strict = 0, bad_prefix = 0;

        for (size_t cut = 0; cut <= ex_len; cut++) {
                size_t want = boundary_below(cut);
                bool whole = want == cut && cut > 0; /* empty input: torn before the header */
                int r = d9_decode(ex, cut, &lenient, &res);

                if (r != 0 || res.consumed != want || res.truncated == whole)
                        bad_lenient++;
                r = d9_decode(ex, cut, &strict, &res);
                if (whole ? r != 0 : (r != -EBADMSG || res.error_offset != want || !res.error[0]))
                        bad_strict++;
                if (d9_valid_prefix_len(ex, cut) != want)
                        bad_prefix++;
        }
        ok(bad_lenient == 0, "lenient decode of every cut stops cleanly at the last whole frame (%d bad)", bad_lenient);
        ok(bad_strict == 0, "strict decode of every torn cut fails at the torn frame's offset (%d bad)", bad_strict);
        ok(bad_prefix == 0, "d9_valid_prefix_len() of every cut is the last frame boundary (%d bad)", bad_prefix);
}

static void expect_corrupt(size_t at, uint8_t byte, size_t want_offset, const char *reason, const char *what)
{
        uint8_t buf[512];
        struct d9_dec_opts lenient = { 0 };
        struct d9_dec_result res;
        int r;

        memcpy(buf, ex, ex_len);
        buf[at] = byte;
        r = d9_decode(buf, ex_len, &lenient, &res);
        ok(r == -EBADMSG && res.error_offset == want_offset && strstr(res.error, reason),
           "%s: error at offset %zu (got %zu: %s)", what, want_offset, res.error_offset, res.error);
        ok(d9_valid_prefix_len(buf, ex_len) == boundary_below(want_offset),
           "%s: valid prefix ends at the frame before it", what);
}

static void corrupt_bytes(void)
{
        uint8_t buf[600];
        struct d9_dec_result res;

        expect_corrupt(0x71, 0x07, 0x71, "unknown frame tag", "unknown frame tag");
        expect_corrupt(0x71, 0x54, 0x71, "unknown frame tag", "0x54 that is not a header");
        expect_corrupt(0x72, 0x09, 0x72, "undefined type_id", "event of an undeclared type");
        expect_corrupt(0x43, 0x10, 0x43, "unknown field type code", "schema with field type 0x10");
        expect_corrupt(0, 'X', 0, "bad magic", "bad magic");

        /* Pool entry renumbered: the event's reference no longer resolves. */
        memcpy(buf, ex, ex_len);
        buf[0x0a] = 5;
        ok(d9_decode(buf, ex_len, &(struct d9_dec_opts){ .strict = true }, &res) == -EBADMSG &&
           res.error_offset == 0x7a && strstr(res.error, "undefined string pool id"),
           "strict: a reference to an undefined string pool id is reported at 0x7a (%zu)", res.error_offset);
        ok(d9_decode(buf, ex_len, NULL, &res) == 0 && res.events == 2,
           "lenient: it decodes, marked unresolved");

        /* Valid file followed by garbage: the garbage is where it stops. */
        memcpy(buf, ex, ex_len);
        memset(buf + ex_len, 0xee, 10);
        ok(d9_decode(buf, ex_len + 10, NULL, &res) == -EBADMSG && res.error_offset == ex_len &&
           res.consumed == ex_len, "trailing garbage is reported at offset %zu", ex_len);

        /* An 11-byte varint in task_id. */
        memcpy(buf, ex, 0x79);
        memset(buf + 0x79, 0xff, 11);
        memcpy(buf + 0x79 + 11, ex + 0x79 + 1, ex_len - 0x79 - 1);
        ok(d9_decode(buf, ex_len + 10, NULL, &res) == -EBADMSG && res.error_offset == 0x79 &&
           strstr(res.error, "varint"), "overlong varint is reported at offset 0x79 (%zu: %s)",
           res.error_offset, res.error);

        /* Schema re-registered differently in the same stream. */
        memcpy(buf, ex, ex_len);
        memcpy(buf + ex_len, ex + 0x22, 0x68 - 0x22);
        buf[ex_len + 0x43 - 0x22] = D9_T_U32;
        ok(d9_decode(buf, ex_len + 0x68 - 0x22, NULL, &res) == -EBADMSG && res.error_offset == ex_len &&
           strstr(res.error, "redefined"), "conflicting schema redefinition is reported at its frame");
        memcpy(buf + ex_len, ex + 0x22, 0x68 - 0x22);
        ok(d9_decode(buf, ex_len + 0x68 - 0x22, NULL, &res) == 0, "byte-identical schema re-registration is accepted");
}

static int last_annotation_check;

static int check_annotations(const struct d9_dec_event *ev, void *ctx)
{
        const struct d9_dec_schema *s = ev->schema;

        if (ev->offset == ex_len + 2 * 25) /* the event after both annotation frames */
                last_annotation_check = s->nannotations == 1 && s->annotations[0].field_index == 0 &&
                                        !strcmp(s->annotations[0].key, "unit") &&
                                        !strcmp(s->annotations[0].value, "ns");
        return 0;
}

/* 0x06 frames: attached to a known schema, ignored for an unknown type_id. */
static void annotation_frames(void)
{
        static const uint8_t ann[] = { 0x06, 0x01 /* LEB128 type_id 1 */, 0x01, 0x00, 0x00, 0x00,
                                       0x04, 0x00, 'u', 'n', 'i', 't', 0x02, 0x00, 0x00, 0x00, 'n', 's',
                                       0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00 };
        uint8_t buf[600];
        size_t n = ex_len;
        struct d9_dec_result res;

        memcpy(buf, ex, ex_len);
        memcpy(buf + n, ann, 18);
        memcpy(buf + n + 18, "\x02\x01\x00\x00\x00\x00\x03", 7); /* pad to 25 with an event */
        n += 25;
        memcpy(buf + n, ann, 18);
        buf[n + 1] = 0x4d; /* type_id 77: not declared */
        memcpy(buf + n + 18, "\x02\x01\x00\x00\x00\x00\x03", 7);
        n += 25;
        memcpy(buf + n, "\x02\x01\x00\x00\x00\x00\x03", 7);
        n += 7;
        ok(d9_decode(buf, n, &(struct d9_dec_opts){ .strict = true, .on_event = check_annotations }, &res) == 0 &&
           res.events == 5 && res.consumed == n, "annotation frames decode, unknown type_id ignored (%s)", res.error);
        ok(last_annotation_check == 1, "the annotation (field 0, unit=ns) is attached to PollEndEvent's schema");
}

static bool single_gzip_member(const uint8_t *gz, size_t len)
{
        z_stream zs = { 0 };
        uint8_t out[4096];
        int zr;

        inflateInit2(&zs, 15 + 16);
        zs.next_in = (uint8_t *)gz;
        zs.avail_in = (uInt)len;
        do {
                zs.next_out = out;
                zs.avail_out = sizeof(out);
                zr = inflate(&zs, Z_NO_FLUSH);
        } while (zr == Z_OK);
        inflateEnd(&zs);
        return zr == Z_STREAM_END && zs.avail_in == 0;
}

static void compressed_input(void)
{
        uint8_t *a, *b, *out, cat[2048];
        size_t alen, blen, olen;
        struct d9_dec_result res;

        /* Two gzip members, each a whole stream: concatenation is a valid file. */
        d9_compress_buf(ex, ex_len, D9_COMPRESS_GZIP, 0, &a, &alen);
        d9_compress_buf(ex, ex_len, D9_COMPRESS_GZIP, 9, &b, &blen);
        ok(single_gzip_member(a, alen), "d9_compress_buf(GZIP) writes a single gzip member");
        memcpy(cat, a, alen);
        memcpy(cat + alen, b, blen);
        ok(d9_decompress(cat, alen + blen, SIZE_MAX, &out, &olen) == 0 && olen == 2 * ex_len &&
           memcmp(out, ex, ex_len) == 0 && memcmp(out + ex_len, ex, ex_len) == 0,
           "multi-member gzip decompresses to both members");
        ok(d9_decode(out, olen, &(struct d9_dec_opts){ .strict = true }, &res) == 0 && res.streams == 2 &&
           res.events == 4, "and decodes as two streams, 4 events");
        free(out);
        ok(d9_decompress(a, alen - 5, SIZE_MAX, &out, &olen) < 0, "a truncated gzip member is an error");
        ok(d9_decompress(cat, alen + blen, ex_len, &out, &olen) == -EFBIG, "output above max_out is refused");
        free(a);
        free(b);

        d9_compress_buf(ex, ex_len, D9_COMPRESS_ZSTD, 0, &a, &alen);
        ok(d9_compress_detect(a, alen) == D9_COMPRESS_ZSTD, "zstd output is detected by magic");
        memcpy(cat, a, alen);
        memcpy(cat + alen, a, alen);
        ok(d9_decompress(cat, 2 * alen, SIZE_MAX, &out, &olen) == 0 && olen == 2 * ex_len &&
           memcmp(out + ex_len, ex, ex_len) == 0, "concatenated zstd frames decompress to both");
        free(out);
        ok(d9_decompress(a, alen - 3, SIZE_MAX, &out, &olen) < 0, "a truncated zstd frame is an error");
        free(a);
}

static void compress_files(void)
{
        char dir[] = "/tmp/d9proto-test-XXXXXX", in[64], gz[64], zst[64];
        enum d9_compress kind;
        uint8_t *out;
        size_t olen;
        FILE *f;

        if (!mkdtemp(dir)) {
                ok(0, "mkdtemp");
                return;
        }
        snprintf(in, sizeof(in), "%s/t.bin", dir);
        snprintf(gz, sizeof(gz), "%s/t.bin.gz", dir);
        snprintf(zst, sizeof(zst), "%s/t.bin.zst", dir);
        f = fopen(in, "wb");
        for (int i = 0; i < 3000; i++) /* ~500 KB, several compressor chunks */
                fwrite(ex, 1, ex_len, f);
        fclose(f);
        ok(d9_compress_file(in, gz, D9_COMPRESS_GZIP, 0) == 0 &&
           d9_read_trace_file(gz, &out, &olen, &kind) == 0 && kind == D9_COMPRESS_GZIP &&
           olen == 3000 * ex_len && memcmp(out + 2999 * ex_len, ex, ex_len) == 0,
           "d9_compress_file(GZIP) round-trips through d9_read_trace_file");
        free(out);
        ok(d9_compress_file(in, zst, D9_COMPRESS_ZSTD, 3) == 0 &&
           d9_read_trace_file(zst, &out, &olen, &kind) == 0 && kind == D9_COMPRESS_ZSTD &&
           olen == 3000 * ex_len && memcmp(out + 2999 * ex_len, ex, ex_len) == 0,
           "d9_compress_file(ZSTD) round-trips through d9_read_trace_file");
        free(out);
        ok(d9_compress_file(dir, zst, D9_COMPRESS_ZSTD, 3) < 0, "compressing a directory fails with an error");
        ok(d9_read_trace_file("/nonexistent/x.bin", &out, &olen, &kind) == -ENOENT, "a missing file is -ENOENT");
        unlink(in);
        unlink(gz);
        unlink(zst);
        rmdir(dir);
}

int main(void)
{
        make_example();
        ok(ex_len == 165, "example file is 165 bytes");
        truncation_at_every_byte();
        corrupt_bytes();
        annotation_frames();
        compressed_input();
        compress_files();
        return tap_done();
}
