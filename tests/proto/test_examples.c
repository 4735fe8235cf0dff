/* The worked examples of trace-format.md section 10 must come out of the
 * encoder byte for byte (they are what dial9's own encoder writes), and
 * decode back to the events they describe. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"
#include "../tap.h"

struct bytes {
        uint8_t b[1024];
        size_t n;
};

/* Appends hex pairs; a quoted run "..." appends its ASCII bytes. */
static void put(struct bytes *x, const char *spec)
{
        for (const char *p = spec; *p;) {
                if (*p == '"') {
                        for (p++; *p != '"'; p++)
                                x->b[x->n++] = (uint8_t)*p;
                        p++;
                } else if (isxdigit((unsigned char)*p)) {
                        x->b[x->n++] = (uint8_t)strtoul((char[]){ p[0], p[1], 0 }, NULL, 16);
                        p += 2;
                } else {
                        p++;
                }
        }
}

static void dump_diff(const uint8_t *got, size_t ngot, const struct bytes *want)
{
        for (size_t i = 0; i < ngot || i < want->n; i++) {
                if (i >= ngot || i >= want->n || got[i] != want->b[i]) {
                        printf("#   first difference at offset 0x%zx: got %02x want %02x\n", i,
                               i < ngot ? got[i] : 0, i < want->n ? want->b[i] : 0);
                        return;
                }
        }
}

static void example_10_1(void)
{
        struct bytes want = { 0 };
        uint8_t out[512];
        struct d9_enc *e;
        uint32_t loc;
        size_t n;

        put(&want, "5452 4300 0103 0100 0000 0000 0000 1000"
                   "0000 7372 632f 6d61 696e 2e72 733a 3130"
                   "3a35 0100 000e 0050 6f6c 6c53 7461 7274"
                   "4576 656e 7401 0400 0900 776f 726b 6572"
                   "5f69 6409 0b00 6c6f 6361 6c5f 7175 6575"
                   "650b 0700 7461 736b 5f69 6409 0900 7370"
                   "6177 6e5f 6c6f 6307 0500 ca9a 3b00 0000"
                   "0002 0000 0000 0003 002a 0000 0000 0101"
                   "000c 0050 6f6c 6c45 6e64 4576 656e 7401"
                   "0100 0900 776f 726b 6572 5f69 6409 0201"
                   "00dc 0500 03");
        d9_enc_new(&e);
        d9_enc_set_output(e, out, sizeof(out), NULL, NULL);
        d9_enc_intern_string(e, "src/main.rs:10:5", 16, &loc);
        ok(d9_enc_poll_start(e, 1000000000, 3, 0, 42, loc) == 0, "10.1: PollStartEvent encodes");
        ok(d9_enc_poll_end(e, 1000001500, 3) == 0, "10.1: PollEndEvent encodes");
        d9_enc_output(e, &n);
        ok(want.n == 165 && n == 165 && memcmp(out, want.b, n) == 0,
           "10.1: minimal file is exactly the 165 documented bytes (got %zu)", n);
        if (n != want.n || memcmp(out, want.b, n))
                dump_diff(out, n, &want);

        /* Segment rotation: a new output buffer starts a fresh stream, so the
         * second file is again exactly the documented bytes. */
        uint8_t out2[512];

        d9_enc_set_output(e, out2, sizeof(out2), NULL, NULL);
        d9_enc_poll_start(e, 1000000000, 3, 0, 42, loc);
        d9_enc_poll_end(e, 1000001500, 3);
        d9_enc_output(e, &n);
        ok(n == 165 && memcmp(out2, want.b, n) == 0,
           "10.1: after d9_enc_set_output() the next file is again the same 165 bytes");
        d9_enc_free(e);
}

static void want_10_2(struct bytes *w)
{
        put(w, "54 52 43 00 01");
        put(w, "01 00 00 0e 00 \"ClockSyncEvent\" 01 01 00 0b 00 \"realtime_ns\" 09");
        put(w, "05 00 f2 05 2a 01 00 00 00");
        put(w, "02 00 00 00 00 00 80 80 e8 ef 9e ca 9c c3 18");
        put(w, "54 52 43 00 01");
        put(w, "01 00 00 14 00 \"SegmentMetadataEvent\" 01 01 00 07 00 \"entries\" 0a");
        put(w, "05 64 f2 05 2a 01 00 00 00");
        put(w, "02 00 00 00 00 00 01 00 00 00 07 00 00 00 \"service\" 03 00 00 00 \"api\"");
        put(w, "54 52 43 00 01");
        put(w, "03 01 00 00 00 00 00 00 00 02 00 00 00 77 30");
        put(w, "04 01 00 00 00 00 00 00 00 02 00 00 00"
               "0a 10 00 00 55 55 00 00 10 20 00 00 55 55 00 00");
        put(w, "01 00 00 0e 00 \"CpuSampleEvent\" 01 06 00"
               "09 00 \"worker_id\" 09 03 00 \"tid\" 0d 06 00 \"source\" 0b"
               "0b 00 \"thread_name\" 87 09 00 \"callchain\" 06 03 00 \"cpu\" 89");
        put(w, "05 c8 f2 05 2a 01 00 00 00");
        put(w, "02 00 00 00 00 00 00 92 10 00 00 00 01 00 00 00 00 00 00 00 00 01 03");
        put(w, "05 00 1f 37 2b 01 00 00 00");
        put(w, "02 00 00 00 00 00 ff 01 93 10 00 00 01 00 00 00 00 00 00");
}

static int count_events(const struct d9_dec_event *ev, void *ctx)
{
        (*(int *)ctx)++;
        return 0;
}

static void example_10_2(void)
{
        static const uint64_t stack[] = { 0x55550000100aULL, 0x555500002010ULL };
        static const struct d9_kv meta[] = { { "service", "api" } };
        struct bytes want = { 0 };
        uint8_t out[1024];
        struct d9_enc *e;
        uint32_t w0, st;
        size_t n;

        want_10_2(&want);
        d9_enc_new(&e);
        d9_enc_set_output(e, out, sizeof(out), NULL, NULL);
        d9_enc_intern_string(e, "w0", 2, &w0);
        d9_enc_intern_stack(e, stack, 2, &st);
        ok(d9_enc_clock_sync(e, 5000000000ULL, 1767225600000000000ULL) == 0, "10.2: ClockSyncEvent");
        d9_enc_new_stream(e);
        ok(d9_enc_segment_metadata(e, 5000000100ULL, meta, 1) == 0, "10.2: SegmentMetadataEvent");
        d9_enc_new_stream(e);
        ok(d9_enc_cpu_sample(e, 5000000200ULL, 0, 4242, 0, w0, st, 3) == 0, "10.2: on-CPU sample");
        ok(d9_enc_cpu_sample(e, 5020000000ULL, 255, 4243, 1, D9_NO_ATOM, st, D9_NO_CPU) == 0,
           "10.2: off-CPU sample without optional fields");
        d9_enc_output(e, &n);
        ok(want.n == 335 && n == 335 && memcmp(out, want.b, n) == 0,
           "10.2: three streams are exactly the 335 documented bytes (got %zu)", n);
        if (n != want.n || memcmp(out, want.b, n))
                dump_diff(out, n, &want);

        int events = 0;
        struct d9_dec_opts opts = { .strict = true, .on_event = count_events, .ctx = &events };
        struct d9_dec_result res;

        ok(d9_decode(want.b, want.n, &opts, &res) == 0 && events == 4 && res.streams == 3,
           "10.2: documented bytes decode strictly to 4 events in 3 streams");
        d9_enc_free(e);
}

int main(void)
{
        example_10_1();
        example_10_2();
        return tap_done();
}
