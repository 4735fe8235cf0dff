/* The live task set (daemon/record/live_tasks.c): each id is new once until
 * it terminates; against a plain bitmap through random adds and removes
 * (the tables' backward-shift deletion); bounded by its generations, with a
 * task polled meanwhile kept and an idle one forgotten and counted. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "daemon/record/live_tasks.h"
#include "../tap.h"

static void test_new_once(void)
{
        struct live_tasks l;

        ok(live_tasks_init(&l, 0) == 0, "init");
        int a = live_tasks_add(&l, 7), b = live_tasks_add(&l, 7);
        live_tasks_remove(&l, 7);
        int c = live_tasks_add(&l, 7);
        ok(a == 1 && b == 0 && c == 1, "an id is new, then known, then new after its terminate (%d %d %d)", a, b, c);
        live_tasks_free(&l);
}

/* Ids 1..4095 in a 1024-slot first table that grows: clusters, wrap-around
 * and deletions in the middle of runs all happen. */
static void test_against_bitmap(void)
{
        static bool in[4096];
        struct live_tasks l;
        unsigned wrong = 0, ops = 200000;

        live_tasks_init(&l, 0);
        srand(9);
        for (unsigned i = 0; i < ops; i++) {
                uint64_t id = 1 + (unsigned)rand() % 4095;

                if (rand() % 3) {
                        wrong += live_tasks_add(&l, id) != (in[id] ? 0 : 1);
                        in[id] = true;
                } else {
                        live_tasks_remove(&l, id);
                        in[id] = false;
                }
        }
        size_t n = 0;
        for (unsigned id = 1; id < 4096; id++)
                n += in[id];
        ok(!wrong && live_tasks_count(&l) == n && !l.forgotten,
           "%u random adds and removes answer as a bitmap does: %u wrong, %zu kept of %zu", ops, wrong,
           live_tasks_count(&l), n);
        live_tasks_free(&l);
}

static void test_generations(void)
{
        struct live_tasks l;
        uint64_t id;

        live_tasks_init(&l, 4);
        for (id = 1; id <= 5; id++)             /* 5: 1..4 become the older generation */
                live_tasks_add(&l, id);
        int polled = live_tasks_add(&l, 1);     /* polled: moves to the newer one */
        for (id = 6; id <= 8; id++)             /* 8: 2..4, idle, are dropped */
                live_tasks_add(&l, id);
        int again1 = live_tasks_add(&l, 1), again2 = live_tasks_add(&l, 2);
        ok(polled == 0 && again1 == 0 && again2 == 1 && l.forgotten == 3,
           "a task polled since its generation went older is kept (%d, %d); an idle one is forgotten, "
           "counted (%llu) and new again (%d)", polled, again1, (unsigned long long)l.forgotten, again2);
        live_tasks_free(&l);

        live_tasks_init(&l, 1000);
        for (id = 1; id <= 1000000; id++)
                live_tasks_add(&l, id);
        ok(live_tasks_count(&l) <= 2000 && l.forgotten + live_tasks_count(&l) == 1000000,
           "a million tasks never seen to terminate: %zu kept, %llu forgotten", live_tasks_count(&l),
           (unsigned long long)l.forgotten);
        live_tasks_free(&l);
}

int main(void)
{
        test_new_once();
        test_against_bitmap();
        test_generations();
        return tap_done();
}
