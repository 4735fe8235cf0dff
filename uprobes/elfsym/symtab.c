/* symtab: loading, sorting and searching the function symbols of ELF
 * files (see elfsym.h). */
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>

#include "elfsym.h"

/* Bounds on what one (possibly hostile) file can make us allocate: a crafted
 * 250 KB ELF whose symbols all point at one huge string would otherwise cost
 * gigabytes of copies and seconds of demangling. Real Rust names stay far
 * below the length cap (D9_SYM_NAME_MAX), and the symbol count's
 * (D9_SYMS_MAX). */

static int table_append(struct d9_sym_table *t, uint64_t vaddr, uint64_t size, const char *raw)
{
        if (t->n >= D9_SYMS_MAX)
                return -E2BIG;
        if (t->n == t->cap) {
                size_t ncap = t->cap ? t->cap * 2 : 1024;
                struct d9_sym *more = realloc(t->syms, ncap * sizeof(*more));

                if (!more)
                        return -ENOMEM;
                t->syms = more;
                t->cap = ncap;
        }
        t->syms[t->n] = (struct d9_sym){ .vaddr = vaddr, .size = size, .raw = strdup(raw),
                                       .v0 = strncmp(raw, "_R", 2) == 0 };
        if (!t->syms[t->n].raw)
                return -ENOMEM;
        t->n++;
        return 0;
}

/* Adds the function symbols of one symbol section; returns how many. */
static int add_section(struct d9_sym_table *t, Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh)
{
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t count = sh->sh_entsize ? sh->sh_size / sh->sh_entsize : 0;
        GElf_Shdr strsh;
        Elf_Scn *strscn = elf_getscn(elf, sh->sh_link);
        /* Distinct names cannot add up to much more than their string table
         * (linkers share tails, hence the slack); many symbols naming one
         * long string is a crafted file, not a build. */
        uint64_t budget = (strscn && gelf_getshdr(strscn, &strsh) ? 4 * strsh.sh_size : 0) + (1u << 20);
        int added = 0, r;

        for (size_t i = 0; d && i < count; i++) {
                GElf_Sym sym;
                const char *name;
                size_t len;

                if (!gelf_getsym(d, (int)i, &sym) || !d9_sym_is_function(&sym))
                        continue;
                name = elf_strptr(elf, sh->sh_link, sym.st_name);
                if (!name || !*name || (len = strnlen(name, D9_SYM_NAME_MAX + 1)) > D9_SYM_NAME_MAX)
                        continue;
                if (len > budget)
                        return -E2BIG;
                budget -= len;
                r = table_append(t, sym.st_value, sym.st_size, name);
                if (r < 0)
                        return r;
                added++;
        }
        return added;
}

int d9_sym_table_add_elf(struct d9_sym_table *t, Elf *elf, bool *has_symtab)
{
        Elf_Scn *scn = NULL;
        GElf_Shdr sh;
        int total = 0;

        while ((scn = elf_nextscn(elf, scn))) {
                int r;

                if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM))
                        continue;
                r = add_section(t, elf, scn, &sh);
                if (r < 0)
                        return r;
                if (sh.sh_type == SHT_SYMTAB && r > 0 && has_symtab)
                        *has_symtab = true;
                total += r;
        }
        return total;
}

static int by_addr_then_name(const void *a, const void *b)
{
        const struct d9_sym *x = a, *y = b;

        if (x->vaddr != y->vaddr)
                return x->vaddr < y->vaddr ? -1 : 1;
        return strcmp(x->raw, y->raw);
}

static void sym_clear(struct d9_sym *s)
{
        free(s->raw);
        free(s->name);
}

void d9_sym_table_sort(struct d9_sym_table *t)
{
        size_t w = 0;

        if (!t->n)
                return;
        qsort(t->syms, t->n, sizeof(*t->syms), by_addr_then_name);
        /* .dynsym repeats what .symtab says. Aliases (other names at the
         * same address) stay; lookups settle on the last by name, whatever
         * order the file lists them in. */
        for (size_t i = 0; i < t->n; i++) {
                if (w && by_addr_then_name(&t->syms[w - 1], &t->syms[i]) == 0) {
                        sym_clear(&t->syms[i]);
                        continue;
                }
                t->syms[w++] = t->syms[i];
        }
        t->n = w;
}

void d9_sym_table_free(struct d9_sym_table *t)
{
        for (size_t i = 0; i < t->n; i++)
                sym_clear(&t->syms[i]);
        free(t->syms);
        memset(t, 0, sizeof(*t));
}

/* The last symbol starting at or before addr. */
static struct d9_sym *last_at_or_before(const struct d9_sym_table *t, uint64_t addr)
{
        size_t lo = 0, hi = t->n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (t->syms[mid].vaddr <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo ? &t->syms[lo - 1] : NULL;
}

struct d9_sym *d9_sym_table_find(const struct d9_sym_table *t, uint64_t addr)
{
        struct d9_sym *s = last_at_or_before(t, addr);

        return s && (s->vaddr == addr || addr - s->vaddr < s->size) ? s : NULL;
}

struct d9_sym *d9_sym_table_find_nearest(const struct d9_sym_table *t, uint64_t addr)
{
        struct d9_sym *s = last_at_or_before(t, addr);

        return s && (!s->size || addr - s->vaddr < s->size) ? s : NULL;
}

const char *d9_sym_name(struct d9_sym *s)
{
        if (!s->name)
                s->name = d9_sym_demangle(s->raw, NULL);
        return s->name ? s->name : s->raw;
}
