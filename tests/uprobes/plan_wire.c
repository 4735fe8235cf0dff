/* The plan child's wire (uprobes/plan_wire.c) on real plans: a plan read
 * back is the plan (same bytes when written again, same JSON), and bytes
 * cut short or changed are refused or read as some plan, never a crash.
 * Usage: plan-wire EXE... (run under valgrind by meson where it exists). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "uprobes/uprobes.h"

static void check_roundtrip(const char *exe)
{
        struct probe_plan *plan = NULL, *back = NULL;
        void *bytes = NULL, *again = NULL;
        size_t len = 0, len2 = 0;
        char *err = NULL;

        if (probe_plan_for_file(exe, &plan, &err) < 0)
                bail("no plan for %s: %s", exe, err ? err : "?");
        ok(probe_plan_serialize(plan, &bytes, &len) == 0 && len > 0, "%s: %zu points as %zu bytes", exe,
           plan->n_points, len);
        ok(probe_plan_parse(bytes, len, &back) == 0 && back->exe_fd == -1 && !back->attach_path,
           "%s: read back, without the writer's fd", exe);
        ok(back && probe_plan_serialize(back, &again, &len2) == 0 && len2 == len && memcmp(bytes, again, len) == 0,
           "%s: written again, the same %zu bytes", exe, len2);
        char *j1 = probe_plan_to_json(plan), *j2 = back ? probe_plan_to_json(back) : NULL;
        ok(j1 && j2 && strcmp(j1, j2) == 0, "%s: the same plan as JSON (%zu bytes)", exe, j1 ? strlen(j1) : 0);

        /* Every prefix of the first 4 KiB and 4,000 more spread over the rest. */
        size_t refused = 0, tried = 0;
        for (size_t cut = 0; cut < len; cut += cut < 4096 ? 1 : len / 4000 + 1, tried++) {
                struct probe_plan *p = NULL;
                refused += probe_plan_parse(bytes, cut, &p) == -EPROTO && !p;
                probe_plan_free(p);
        }
        ok(refused == tried, "%s: %zu of %zu cut-short answers refused as -EPROTO", exe, refused, tried);

        /* Changed bytes: refused or some plan, freed cleanly either way. */
        unsigned char *bad = malloc(len);
        size_t parsed = 0, rejected = 0;
        srand(42);
        for (int i = 0; bad && i < 3000; i++) {
                struct probe_plan *p = NULL;
                memcpy(bad, bytes, len);
                for (int k = 0; k < 1 + i % 4; k++)
                        bad[(size_t)rand() % len] ^= (unsigned char)(1u << (rand() % 8));
                int r = probe_plan_parse(bad, len, &p);
                parsed += r == 0;
                rejected += r < 0 && !p;
                probe_plan_free(p);
        }
        ok(parsed + rejected == 3000, "%s: 3000 answers with changed bytes: %zu read, %zu refused", exe, parsed,
           rejected);
        free(bad);
        free(j1);
        free(j2);
        free(bytes);
        free(again);
        free(err);
        probe_plan_free(plan);
        probe_plan_free(back);
}

int main(int argc, char **argv)
{
        if (argc < 2)
                bail("usage: plan-wire EXE...");
        for (int i = 1; i < argc; i++)
                check_roundtrip(argv[i]);
        return tap_done();
}
