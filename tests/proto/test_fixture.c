/* Decodes dial9's own recorded segment (shared/fixtures/dial9) in strict
 * mode and checks every count its README states: the decoder must accept
 * the whole file, byte for byte, and agree with dial9's strict decoder. */
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"
#include "../tap.h"

struct counts {
        uint64_t by_name[16];
        uint64_t cpu_source1, cpu_source1_kernel;
        uint64_t span_events, symbols_after_last_header;
        uint32_t last_stream;
        char span_sites[64][256];
        int nsites;
        size_t last_header_offset;
};

static const char *const names[] = {
        "PollStartEvent", "PollEndEvent", "WorkerParkEvent", "WorkerUnparkEvent",
        "WakeEventEvent", "CpuSampleEvent", "TaskDumpEvent", "QueueSampleEvent",
        "TaskSpawnEvent", "TaskTerminateEvent", "SymbolTableEntry", "ClockSyncEvent",
        "SegmentMetadataEvent",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

static int field_index(const struct d9_dec_schema *s, const char *name)
{
        for (int i = 0; i < s->nfields; i++)
                if (strcmp(s->fields[i].name, name) == 0)
                        return i;
        return -1;
}

static void note_span_site(struct counts *c, const char *name)
{
        const char *suffix = strchr(name, ':');

        if (!suffix)
                return;
        for (int i = 0; i < c->nsites; i++)
                if (strcmp(c->span_sites[i], suffix) == 0)
                        return;
        if (c->nsites < 64)
                snprintf(c->span_sites[c->nsites++], sizeof(c->span_sites[0]), "%s", suffix);
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        struct counts *c = ctx;
        const char *name = ev->schema->name;

        for (size_t i = 0; i < NNAMES; i++)
                if (strcmp(name, names[i]) == 0)
                        c->by_name[i]++;
        if (strcmp(name, "CpuSampleEvent") == 0) {
                const struct d9_value *src = &ev->values[field_index(ev->schema, "source")];
                const struct d9_value *cc = &ev->values[field_index(ev->schema, "callchain")];

                if (src->u == 1) {
                        c->cpu_source1++;
                        /* kernel frames come first in the chain: top half addresses */
                        if (cc->resolved && cc->stack.n && d9_value_stack_addr(cc, 0) >> 63)
                                c->cpu_source1_kernel++;
                }
        }
        if (strncmp(name, "SpanEnter:", 10) == 0 || strncmp(name, "SpanExit:", 9) == 0) {
                c->span_events++;
                note_span_site(c, name);
        }
        if (strcmp(name, "SymbolTableEntry") == 0 && ev->stream == c->last_stream)
                c->symbols_after_last_header++;
        return 0;
}

int main(int argc, char **argv)
{
        struct counts c = { 0 };
        struct d9_dec_opts opts = { .strict = true, .on_event = on_event, .ctx = &c };
        struct d9_dec_result res;
        enum d9_compress kind;
        uint8_t *buf;
        size_t len;
        int r;

        if (argc != 2)
                bail("usage: test_fixture PATH/demo-trace.bin.gz");
        r = d9_read_trace_file(argv[1], &buf, &len, &kind);
        if (r < 0)
                bail("cannot read dial9 fixture %s: %s (shared/ must sit beside the source tree)",
                         argv[1], strerror(-r));
        ok(kind == D9_COMPRESS_GZIP, "fixture is detected as gzip");
        ok(len == 4047237, "decompresses to 4,047,237 raw bytes (got %zu)", len);

        c.last_stream = 13;
        r = d9_decode(buf, len, &opts, &res);
        ok(r == 0, "strict decode succeeds (%s at %zu)", res.error, res.error_offset);
        ok(res.consumed == len && !res.truncated, "every byte is consumed (%zu of %zu)", res.consumed, len);
        ok(res.streams == 14, "14 concatenated streams (got %u)", res.streams);
        ok(res.events == 210639, "210,639 events (got %llu)", (unsigned long long)res.events);

        static const uint64_t want[NNAMES] = { 36801, 36801, 6304, 6304, 35552, 6949, 12952,
                                               464, 262, 359, 992, 2, 1 };
        for (size_t i = 0; i < NNAMES; i++)
                ok(c.by_name[i] == want[i], "%llu %s (got %llu)", (unsigned long long)want[i],
                   names[i], (unsigned long long)c.by_name[i]);
        ok(c.cpu_source1 == 6877, "6,877 CpuSampleEvents with source=1 (got %llu)",
           (unsigned long long)c.cpu_source1);
        ok(c.cpu_source1_kernel == 6877, "all source=1 samples start with kernel frames (got %llu)",
           (unsigned long long)c.cpu_source1_kernel);
        ok(c.nsites == 5, "span events come from 5 call sites (got %d)", c.nsites);
        ok(c.symbols_after_last_header == 992,
           "all 992 SymbolTableEntry events decode as a continuation of the last stream (got %llu)",
           (unsigned long long)c.symbols_after_last_header);
        ok(d9_valid_prefix_len(buf, len) == len, "the whole fixture is a valid prefix of itself");
        free(buf);
        return tap_done();
}
