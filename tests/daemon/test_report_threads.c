/* d9ctl report's threads: a worker idle for the whole recording (only
 * off-CPU samples) still has its name in the Workers table (npm
 * postgrestools and codex, idle: the name was null), and the on-CPU
 * samples of threads that are no worker add up by thread name, where many
 * short-lived ones, each too small to list alone, held most of the CPU
 * (npm codex: 86 % on 74 file walkers, the busiest 2.7 %). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/d9proto.h"
#include "../tap.h"
#include "report_of_trace.h"

#define MS 1000000ull
#define WALKERS 20

int main(void)
{
        uint8_t *buf = malloc(1 << 20);
        uint32_t walker, idle, mainn, chain;
        uint64_t pc = 0x401000, ts = 1000 * MS;
        const json_t *g, *w, *names;
        static char text[1 << 16];
        struct d9_enc *enc;
        const uint8_t *trace;
        const char *wname = NULL;
        json_t *doc;
        size_t n;
        int e = 0;

        if (!buf || d9_enc_new(&enc) < 0)
                return 1;
        d9_enc_set_output(enc, buf, 1 << 20, NULL, NULL);
        e |= d9_enc_intern_string(enc, "walker", 6, &walker);
        e |= d9_enc_intern_string(enc, "rt-worker-idle", 14, &idle);
        e |= d9_enc_intern_string(enc, "main", 4, &mainn);
        e |= d9_enc_intern_stack(enc, &pc, 1, &chain);
        /* Worker 0 sleeps the whole recording: off-CPU samples only. */
        for (int i = 0; i < 3; i++)
                e |= d9_enc_cpu_sample(enc, ts += MS, 0, 10, 1, idle, chain, D9_NO_CPU);
        /* 20 short-lived threads of 4 samples each (5 % apiece), and main. */
        for (uint32_t t = 0; t < WALKERS; t++)
                for (int i = 0; i < 4; i++)
                        e |= d9_enc_cpu_sample(enc, ts += MS, 255, 100 + t, 0, walker, chain, 0);
        for (int i = 0; i < 20; i++)
                e |= d9_enc_cpu_sample(enc, ts += MS, 255, 1, 0, mainn, chain, 0);
        trace = d9_enc_output(enc, &n);

        doc = report_of_trace(trace, n, text, sizeof(text));
        ok(e == 0 && doc != NULL, "the trace is written (%d) and read (%zu bytes)", e, n);
        w = json_array_get(json_object_get(doc, "workers"), 0);
        wname = json_string_value(json_object_get(json_array_get(json_object_get(w, "threads"), 0), "name"));
        ok(wname && !strcmp(wname, "rt-worker-idle"), "the idle worker's row has its name (%s)",
           wname ? wname : "null");
        names = json_object_get(doc, "cpu_off_workers_by_name");
        g = json_array_get(names, 0);
        ok(g && !strcmp(json_string_value(json_object_get(g, "name")), "walker") &&
           json_integer_value(json_object_get(g, "threads")) == WALKERS &&
           json_integer_value(json_object_get(g, "cpu_samples")) == 4 * WALKERS,
           "by name, first: walker, %d threads, %d samples (%s, %lld threads, %lld samples)", WALKERS, 4 * WALKERS,
           g ? json_string_value(json_object_get(g, "name")) : "none",
           g ? (long long)json_integer_value(json_object_get(g, "threads")) : 0LL,
           g ? (long long)json_integer_value(json_object_get(g, "cpu_samples")) : 0LL);
        ok(json_array_size(json_object_get(doc, "threads_off_workers")) == 3 &&
           json_integer_value(json_object_get(json_array_get(json_object_get(doc, "threads_off_workers"), 0), "tid")) == 1,
           "the busiest single threads still lead with main");
        ok(strstr(text, "by thread name: walker (20 threads) 80.0%, main (1 thread) 20.0%") != NULL,
           "the text says where the CPU went by name");
        if (!strstr(text, "by thread name: walker"))
                printf("# %.*s\n", 3000, text);
        json_decref(doc);
        d9_enc_free(enc);
        free(buf);
        return tap_done();
}
