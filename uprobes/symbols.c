/* symbols: the function symbols a probe plan is made from: the
 * executable's and, when it has no .symtab, its separate debug file's
 * (elfsym.h holds the table).
 *
 * Only names mentioning tokio are demangled up front (that is all the probe
 * table needs, and a large binary has 100k+ symbols); d9_sym_name()
 * demangles the rest on demand for labels. */
#include <errno.h>
#include <string.h>

#include "uprobes_int.h"

static int load_image(const struct elf_image *img, struct symtab *st)
{
        int r = img->has_sections ? d9_sym_table_add_elf(&st->table, img->elf, &st->from_symtab) : 0;

        return r < 0 ? r : 0;
}

/* Demangles the tokio names, which the probe table is matched against:
 * function entries only. A BOLT-optimized build (npm mise 2026.9.15) names
 * each moved function's old copy `.org.0` and its cold part `.cold.0`, so
 * a probe there would see a poll start in the middle of a poll, or twice. */
static int name_tokio_syms(struct symtab *st)
{
        for (size_t i = 0; i < st->table.n; i++) {
                struct d9_sym *s = &st->table.syms[i];

                if (!strstr(s->raw, "tokio") || d9_sym_not_an_entry(s->raw))
                        continue;
                if (!s->name && !(s->name = d9_sym_demangle(s->raw, NULL)))
                        return -ENOMEM;
                st->any_v0 |= s->v0;
        }
        return 0;
}

int uprobes_symtab_load(const struct elf_image *img, const char *root, struct symtab *st)
{
        int r;

        memset(st, 0, sizeof(*st));
        r = load_image(img, st);
        if (r < 0)
                return r;
        if (!st->from_symtab) {
                st->debug_path = uprobes_debug_file_find(img, root);
                if (st->debug_path) {
                        struct elf_image *dbg = NULL;

                        if (d9_elf_image_open(st->debug_path, &dbg, NULL) == 0) {
                                r = load_image(dbg, st);
                                d9_elf_image_free(dbg);
                                if (r < 0)
                                        return r;
                        }
                }
        }
        d9_sym_table_sort(&st->table);
        return name_tokio_syms(st);
}

void uprobes_symtab_free(struct symtab *st)
{
        d9_sym_table_free(&st->table);
        free(st->debug_path);
        memset(st, 0, sizeof(*st));
}
