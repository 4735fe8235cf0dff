/* The plan's dyn_fns (uprobes/plan_dyn_names.c) on the real targets: what
 * a boxed future's poll can be, named as the sealer's symbolizer names the
 * executable's address (what the drain loop's own lookup printed before
 * the table), or where a method that only jumps on goes, named by it;
 * holding the mixed target's four boxed futures, sorted and
 * found exactly; the same table from a stripped build's debug file; none
 * for a stripped build without one.
 * Usage: dyn-fns STRIPPED_EXE SYMBOLIZED_EXE... (the first symbolized one is
 * the stripped one's release build). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/symbolize/symbolize.h"
#include "tests/tap.h"
#include "uprobes/uprobes.h"

static bool in_exec_segment(const struct probe_plan *p, uint64_t vaddr)
{
        for (size_t i = 0; i < p->n_segments; i++)
                if (p->segments[i].exec && vaddr >= p->segments[i].vaddr &&
                    vaddr - p->segments[i].vaddr < p->segments[i].filesz)
                        return true;
        return false;
}

static struct probe_plan *plan_of(const char *exe)
{
        struct probe_plan *plan = NULL;
        char *err = NULL;

        if (probe_plan_for_file(exe, &plan, &err) < 0)
                bail("no plan for %s: %s", exe, err ? err : "?");
        free(err);
        return plan;
}

/* Names, order, lookups and the boxed futures of one symbolized build. */
static void check_named(const char *exe)
{
        struct probe_plan *p = plan_of(exe);
        const char *symfile = p->debug_file ? p->debug_file : exe;
        struct symbolizer *sym = symbolizer_new_for_debug_file(symfile);
        size_t sorted = 0, same = 0, thunked = 0, exec = 0, exact = 0, boxed = 0;
        uint64_t size;

        if (!sym)
                bail("cannot read the symbols of %s", symfile);
        ok(p->n_dyn_fns >= 50 && p->n_dyn_fns <= 1000 && p->dyn_fn_text_len < 64 * 1024,
           "%s: %zu functions, %zu bytes of names (%zu bytes in all), planned in %.1f ms", exe, p->n_dyn_fns,
           p->dyn_fn_text_len, p->n_dyn_fns * sizeof(*p->dyn_fns) + p->dyn_fn_text_len, p->elapsed_ms);
        for (size_t i = 0; i < p->n_dyn_fns; i++) {
                uint64_t v = p->dyn_fns[i].vaddr;
                const char *name = p->dyn_fn_text + p->dyn_fns[i].name;
                const char *want = symbolizer_lookup_vaddr(sym, v, &size);

                sorted += !i || v > p->dyn_fns[i - 1].vaddr;
                exec += in_exec_segment(p, v);
                exact += probe_plan_dyn_fn_name(p, v) == name && !probe_plan_dyn_fn_name(p, v + 1);
                boxed += strstr(name, "d9_target::mixed::boxed_batch::{") == name;
                if (want && !strcmp(want, name)) {
                        same++;
                        continue;
                }
                /* Where a method that only jumps on goes: named by it, an
                 * entry of its own (vtable shims jumping to closures). */
                for (size_t j = 0; j < p->n_dyn_fns; j++) {
                        const char *its = symbolizer_lookup_vaddr(sym, p->dyn_fns[j].vaddr, &size);

                        if (j != i && p->dyn_fns[j].name == p->dyn_fns[i].name && its && !strcmp(its, name)) {
                                thunked++;
                                break;
                        }
                }
                diag("0x%llx: table '%s', symbolizer '%s'", (unsigned long long)v, name, want ? want : "-");
        }
        ok(sorted == p->n_dyn_fns && exec == p->n_dyn_fns,
           "%s: sorted by address, each once (%zu), each in the executable segment (%zu)", exe, sorted, exec);
        ok(same + thunked == p->n_dyn_fns && thunked >= 1,
           "%s: every name is the sealer's for that address (%zu of %zu), or for a method that only jumps there "
           "(%zu)", exe, same, p->n_dyn_fns, thunked);
        ok(exact == p->n_dyn_fns, "%s: found by its address and only there (%zu)", exe, exact);
        ok(boxed == 4, "%s: the mixed target's 4 boxed futures' polls are in it (%zu)", exe, boxed);
        ok(!probe_plan_dyn_fn_name(p, 0) && !probe_plan_dyn_fn_name(p, UINT64_MAX), "%s: no name outside it", exe);
        symbolizer_free(sym);
        probe_plan_free(p);
}

/* A stripped build with its debug file beside it names the same, and a
 * copy of it alone keeps the same functions, naming none. */
static void check_stripped(const char *stripped, const char *release)
{
        char dir[] = "/tmp/d9-dyn-fns-XXXXXX", copy[PATH_MAX], cmd[2 * PATH_MAX];
        struct probe_plan *s = plan_of(stripped), *r = plan_of(release), *alone;

        ok(s->debug_file && s->n_dyn_fns == r->n_dyn_fns &&
           !memcmp(s->dyn_fns, r->dyn_fns, r->n_dyn_fns * sizeof(*r->dyn_fns)) &&
           s->dyn_fn_text_len == r->dyn_fn_text_len && !memcmp(s->dyn_fn_text, r->dyn_fn_text, r->dyn_fn_text_len),
           "stripped with debug file %s: the release build's table (%zu functions)",
           s->debug_file ? s->debug_file : "-", s->n_dyn_fns);
        if (!mkdtemp(dir))
                bail("mkdtemp: %m");
        snprintf(copy, sizeof(copy), "%s/d9-target", dir);
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", stripped, copy);
        if (system(cmd) != 0)
                bail("cannot copy %s", stripped);
        alone = plan_of(copy);
        size_t named = 0, kept = 0;
        for (size_t i = 0; i < alone->n_dyn_fns; i++)
                named += alone->dyn_fn_text[alone->dyn_fns[i].name] != 0;
        for (size_t i = 0; i < r->n_dyn_fns; i++) {
                const char *n = probe_plan_dyn_fn_name(alone, r->dyn_fns[i].vaddr);
                kept += n && !*n;
        }
        ok(!alone->debug_file && alone->n_dyn_fns >= r->n_dyn_fns && alone->dyn_fn_text_len == 1 && named == 0 &&
           kept == r->n_dyn_fns,
           "stripped alone: the same functions (%zu of the release build's %zu), none named (%zu): its boxed "
           "futures are '[unnamed] FILE 0x...'", kept, r->n_dyn_fns, named);
        unlink(copy);
        rmdir(dir);
        probe_plan_free(alone);
        probe_plan_free(s);
        probe_plan_free(r);
}

int main(int argc, char **argv)
{
        if (argc < 3)
                bail("usage: dyn-fns STRIPPED_EXE SYMBOLIZED_EXE...");
        for (int i = 2; i < argc; i++)
                check_named(argv[i]);
        check_stripped(argv[1], argv[2]);
        return tap_done();
}
