/* The plan child's wire (uprobes/plan_wire.c) on real plans: a plan read
 * back is the plan (same bytes when written again, same JSON), and bytes
 * cut short or changed are refused or read as some plan, never a crash;
 * the first's boxed-future names (it must have some) each wrong count,
 * length, order and offset refused.
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

/* Bytes with the u64 at off set to v: refused, never a plan. */
static bool refused_with(const unsigned char *bytes, size_t len, size_t off, uint64_t v)
{
        unsigned char *bad = malloc(len);
        struct probe_plan *p = NULL;
        int r;

        memcpy(bad, bytes, len);
        memcpy(bad + off, &v, sizeof(v));
        r = probe_plan_parse(bad, len, &p);
        probe_plan_free(p);
        free(bad);
        return r == -EPROTO && !p;
}

static uint64_t u64_at(const unsigned char *bytes, size_t off)
{
        uint64_t v;

        memcpy(&v, bytes + off, sizeof(v));
        return v;
}

/* The plan's tail: its PT_LOAD segments, its TLS size, the boxed
 * futures' names (dyn_fns), the part the drain loop names tasks by, and
 * the harness call sites, which tell long polls from Tokio's own code. Every
 * cut inside it and every count, length, flag, order and offset made
 * wrong is refused. */
static void check_table_hostile(const char *exe)
{
        struct probe_plan *plan = NULL;
        unsigned char *bytes = NULL;
        size_t len = 0, refused = 0, tried = 0;
        char *err = NULL;

        if (probe_plan_for_file(exe, &plan, &err) < 0 || probe_plan_serialize(plan, (void **)&bytes, &len) < 0)
                bail("no plan for %s: %s", exe, err ? err : "?");
        size_t n = plan->n_dyn_fns, text = plan->dyn_fn_text_len, nseg = plan->n_segments;
        size_t nh = plan->n_harness_sites, nh_at = len - 8 * nh - 8;
        size_t fns = nh_at - 16 * n, text_at = fns - text, count_at = text_at - 16, tls_at = count_at - 8;
        size_t seg_at = tls_at - 32 * nseg, nseg_at = seg_at - 8;
        if (n < 8 || nh < 3 || u64_at(bytes, nh_at) != nh || u64_at(bytes, nh_at + 8) != plan->harness_sites[0] ||
            u64_at(bytes, count_at) != n || u64_at(bytes, count_at + 8) != text ||
            u64_at(bytes, nseg_at) != nseg || u64_at(bytes, tls_at) != plan->tls_size || !plan->tls_size)
                bail("%s: %zu functions, %zu segments: not where the wire puts them", exe, n, nseg);

        for (size_t cut = nseg_at; cut < len; cut++, tried++) {
                struct probe_plan *p = NULL;
                refused += probe_plan_parse(bytes, cut, &p) == -EPROTO && !p;
                probe_plan_free(p);
        }
        ok(refused == tried, "%s: all %zu cuts inside the segments, names and harness sites refused", exe, tried);
        ok(refused_with(bytes, len, nh_at, nh + 1) && refused_with(bytes, len, nh_at, nh - 1) &&
           refused_with(bytes, len, nh_at, PROBE_HARNESS_SITES_MAX + 1) && refused_with(bytes, len, nh_at, UINT64_MAX) &&
           refused_with(bytes, len, nh_at + 16, plan->harness_sites[0]) &&
           refused_with(bytes, len, nh_at + 16, plan->harness_sites[0] - 1),
           "%s: harness sites: one more, one less, over the bound, 2^64-1, equal or out of order: refused", exe);

        uint64_t first = u64_at(bytes, fns), second = u64_at(bytes, fns + 16);
        uint64_t name1 = u64_at(bytes, fns + 8);
        size_t name1_len = strlen(plan->dyn_fn_text + name1);
        ok(refused_with(bytes, len, nseg_at, PROBE_SEGMENTS_MAX + 1) && refused_with(bytes, len, nseg_at, nseg + 1) &&
           refused_with(bytes, len, seg_at + 24, 2),
           "%s: segments: too many, one more than sent, an exec flag of 2: refused", exe);
        /* The TLS size moves BPF's Worker search: bounded as the ELF reader bounds it. */
        ok(refused_with(bytes, len, tls_at, (1u << 20) + 1), "%s: a TLS size over 1 MiB: refused", exe);
        ok(refused_with(bytes, len, count_at, n + 1) && refused_with(bytes, len, count_at, n - 1) &&
           refused_with(bytes, len, count_at, PROBE_DYN_FNS_MAX + 1) && refused_with(bytes, len, count_at, UINT64_MAX) &&
           refused_with(bytes, len, count_at, 0),
           "%s: function count one more, one less, over the bound, 2^64-1, 0 with names: refused", exe);
        ok(refused_with(bytes, len, count_at + 8, text + 1) && refused_with(bytes, len, count_at + 8, text - 1) &&
           refused_with(bytes, len, count_at + 8, PROBE_DYN_FN_TEXT_MAX + 1) &&
           refused_with(bytes, len, count_at + 8, 0),
           "%s: name bytes one more, one less, over the bound, none: refused", exe);
        ok(refused_with(bytes, len, fns, second) && refused_with(bytes, len, fns + 16, first) &&
           refused_with(bytes, len, fns + 16, first - 1),
           "%s: addresses equal or out of order: refused", exe);
        ok(refused_with(bytes, len, fns + 8, text) && refused_with(bytes, len, fns + 8, UINT32_MAX + 1ull) &&
           (name1_len < 2 || refused_with(bytes, len, fns + 8, name1 + 1)),
           "%s: a name offset past the text, past 32 bits, inside a name: refused", exe);
        unsigned char *bad = malloc(len);
        struct probe_plan *p = NULL;
        memcpy(bad, bytes, len);
        bad[fns - 1] = 'x';
        ok(probe_plan_parse(bad, len, &p) == -EPROTO && !p, "%s: names not ending in a NUL: refused", exe);
        probe_plan_free(p);
        free(bad);
        free(bytes);
        free(err);
        probe_plan_free(plan);
}

int main(int argc, char **argv)
{
        if (argc < 2)
                bail("usage: plan-wire EXE...");
        for (int i = 1; i < argc; i++)
                check_roundtrip(argv[i]);
        check_table_hostile(argv[1]);
        return tap_done();
}
