/* d9ctl report's wake-to-poll delays when a task moves between workers.
 * A poll whose end translate decides from the task's start on another
 * worker (no return probe: its thread's next event comes later) is
 * written after that start, and after the new poll's own wake and end
 * (npm postgrestools, the full set: ten delays of 50-74 ms listed, each
 * from such a stale end, where the task waited 12 us). The report takes
 * only the end of a task's latest poll as when its wait began. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "proto/d9proto.h"
#include "../tap.h"
#include "report_of_trace.h"

#define MS 1000000ull
#define US 1000ull
#define TASK 4
#define WAKER 9

int main(void)
{
        const uint64_t t0 = 1000 * MS, moved = t0 + 1 * MS;
        uint8_t *buf = malloc(1 << 20);
        uint64_t longest = 0, delay, short_wait = 0;
        uint32_t fut;
        int e = 0;
        const json_t *w, *wakes;
        struct d9_enc *enc;
        const uint8_t *trace;
        json_t *doc;
        size_t n, i;

        if (!buf || d9_enc_new(&enc) < 0)
                return 1;
        d9_enc_set_output(enc, buf, 1 << 20, NULL, NULL);
        if (d9_enc_intern_string(enc, "app::serve", 10, &fut) < 0)
                return 1;
        /* Worker 1 polls the task; worker 0 takes it at `moved`. */
        e |= d9_enc_poll_start(enc, t0, 1, 0, TASK, fut);
        e |= d9_enc_poll_start(enc, moved, 0, 0, TASK, fut);
        /* Woken inside that poll: queued at its end, polled 68 us later. */
        e |= d9_enc_wake(enc, moved + 100 * US, WAKER, TASK, 0);
        e |= d9_enc_poll_end(enc, moved + 400 * US, 0);
        e |= d9_enc_poll_start(enc, moved + 468 * US, 0, 0, TASK, fut);
        e |= d9_enc_wake(enc, moved + 1 * MS, WAKER, TASK, 0);
        /* Worker 1's end, stamped at the start that ended it, written now. */
        e |= d9_enc_poll_end(enc, moved, 1);
        /* The 74 ms poll ends; the task is polled again 12 us later. */
        e |= d9_enc_poll_end(enc, moved + 74063 * US, 0);
        e |= d9_enc_poll_start(enc, moved + 74075 * US, 0, 0, TASK, fut);
        e |= d9_enc_poll_end(enc, moved + 74100 * US, 0);
        trace = d9_enc_output(enc, &n);

        doc = report_of_trace(trace, n, NULL, 0);
        ok(e == 0 && doc != NULL, "the trace is written (%d) and read (%zu bytes)", e, n);
        wakes = json_object_get(doc, "longest_wake_to_poll");
        json_array_foreach(wakes, i, w) {
                delay = (uint64_t)json_integer_value(json_object_get(w, "delay_ns"));
                printf("# wake of task %lld at %llu: polled %llu ns later\n",
                       json_integer_value(json_object_get(w, "task")),
                       (unsigned long long)json_integer_value(json_object_get(w, "woken_at_ns")),
                       (unsigned long long)delay);
                longest = delay > longest ? delay : longest;
                short_wait += delay == 12 * US;
        }
        ok(json_array_size(wakes) == 2 && short_wait == 1, "both waits are listed (%zu), the second one of 12 us",
           json_array_size(wakes));
        ok(longest == 68 * US, "the longest is the 68 us after the first poll's end (%llu ns), not one from worker "
           "1's late end (74 ms)", (unsigned long long)longest);
        json_decref(doc);
        d9_enc_free(enc);
        free(buf);
        return tap_done();
}
