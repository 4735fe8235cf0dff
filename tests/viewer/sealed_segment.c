/* sealed-segment DIR INDEX gzip|zstd|none POLLS: writes trace.INDEX.bin.active
 * in DIR with d9d's own segment writer (POLLS polls of scattered task ids on
 * 4 workers, 1 µs apart, from now) and seals it with d9d's sealer, then
 * prints the sealed path. For the listing tests: a segment exactly as d9d
 * seals one, many times larger than what a listing may read of it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/record/segment.h"
#include "daemon/seal/sealer.h"
#include "proto/d9proto.h"

int main(int argc, char **argv)
{
        struct segment_writer sw;
        struct seal_job job = { .root_fd = -1 };
        uint32_t label;
        int r;

        if (argc != 5) {
                fprintf(stderr, "usage: sealed-segment DIR INDEX gzip|zstd|none POLLS\n");
                return 2;
        }
        job.compression = !strcmp(argv[3], "gzip") ? D9_COMPRESS_GZIP : !strcmp(argv[3], "zstd") ? D9_COMPRESS_ZSTD
                                                                                                   : D9_COMPRESS_NONE;
        unsigned long polls = strtoul(argv[4], NULL, 10);
        r = segment_writer_init(&sw, argv[1]);
        if (!r) {
                sw.index = (unsigned)strtoul(argv[2], NULL, 10);
                r = segment_open(&sw, (struct d9_kv[]){ { "service", "listing-test" } }, 1);
        }
        if (!r)
                r = d9_enc_intern_string(sw.enc, "src/main.rs:1:1", 15, &label);
        uint64_t t0 = d9_now_ns();
        for (unsigned long i = 0; i < polls && !r; i++) {
                uint64_t ts = t0 + i * 1000, task = (i * 2654435761u) % 1000003 + 1;
                r = d9_enc_poll_start(sw.enc, ts, i % 4, 0, task, label);
                if (!r)
                        r = d9_enc_poll_end(sw.enc, ts + task % 900, i % 4);
        }
        if (!r)
                r = segment_close(&sw, job.active, sizeof(job.active));
        if (!r)
                r = seal_segment(&job);
        segment_writer_destroy(&sw);
        if (r < 0) {
                fprintf(stderr, "sealed-segment: %s: %s\n", argv[1], strerror(-r));
                return 1;
        }
        printf("%s\n", job.sealed);
        return 0;
}
