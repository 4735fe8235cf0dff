/* symbols: the function symbols of an executable and, when one exists, of its
 * separate debug file, demangled and normalized, sorted by address.
 *
 * Only names mentioning tokio are demangled up front (that is all the probe
 * table needs, and a large binary has 100k+ symbols); symtab_lookup()
 * demangles the rest on demand for labels. */
#include <errno.h>
#include <string.h>

#include "uprobes_int.h"

/* Bounds on what one (possibly hostile) file can make us allocate: a crafted
 * 250 KB ELF whose symbols all point at one huge string would otherwise cost
 * gigabytes of copies and seconds of demangling. Real Rust names stay far
 * below the length cap; the largest binaries seen have ~1M symbols. */
#define SYM_NAME_MAX 4096
#define SYMS_MAX (4u << 20)

static int add_sym(struct symtab *st, size_t *cap, uint64_t vaddr, uint64_t size, const char *raw)
{
        if (strnlen(raw, SYM_NAME_MAX + 1) > SYM_NAME_MAX)
                return 0;
        if (st->n >= SYMS_MAX)
                return -E2BIG;
        if (st->n == *cap) {
                size_t ncap = *cap ? *cap * 2 : 4096;
                struct func_sym *n = realloc(st->syms, ncap * sizeof(*n));

                if (!n)
                        return -ENOMEM;
                st->syms = n;
                *cap = ncap;
        }
        struct func_sym *s = &st->syms[st->n];

        *s = (struct func_sym){ .vaddr = vaddr, .size = size };
        s->raw = strdup(raw);
        if (!s->raw)
                return -ENOMEM;
        if (strstr(raw, "tokio")) {
                s->name = rust_demangle_normalized(raw, &s->v0);
                if (!s->name)
                        return -ENOMEM;
                st->any_v0 |= s->v0;
        }
        st->n++;
        return 0;
}

/* Adds the STT_FUNC symbols of one symbol section; returns how many. */
static int load_section(const struct elf_image *img, Elf_Scn *scn, const GElf_Shdr *sh,
                        struct symtab *st, size_t *cap)
{
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t count = sh->sh_entsize ? sh->sh_size / sh->sh_entsize : 0;
        GElf_Shdr strsh;
        Elf_Scn *strscn = elf_getscn(img->elf, sh->sh_link);
        /* Distinct names cannot add up to much more than their string table
         * (linkers share tails, hence the slack); many symbols naming one
         * long string is a crafted file, not a build. */
        uint64_t budget = (strscn && gelf_getshdr(strscn, &strsh) ? 4 * strsh.sh_size : 0) + (1u << 20);
        int added = 0, r;

        for (size_t i = 0; d && i < count; i++) {
                GElf_Sym sym;
                const char *name;

                if (!gelf_getsym(d, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
                    sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
                        continue;
                name = elf_strptr(img->elf, sh->sh_link, sym.st_name);
                if (!name || !*name)
                        continue;
                size_t len = strnlen(name, SYM_NAME_MAX + 1);
                if (len > budget)
                        return -E2BIG;
                budget -= len;
                r = add_sym(st, cap, sym.st_value, sym.st_size, name);
                if (r < 0)
                        return r;
                added++;
        }
        return added;
}

static int load_image(const struct elf_image *img, struct symtab *st, size_t *cap, bool *had_symtab)
{
        Elf_Scn *scn = NULL;
        GElf_Shdr sh;

        while (img->has_sections && (scn = elf_nextscn(img->elf, scn))) {
                int r;

                if (!gelf_getshdr(scn, &sh) ||
                    (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM))
                        continue;
                r = load_section(img, scn, &sh, st, cap);
                if (r < 0)
                        return r;
                if (sh.sh_type == SHT_SYMTAB && r > 0)
                        *had_symtab = true;
        }
        return 0;
}

static int by_addr(const void *a, const void *b)
{
        const struct func_sym *x = a, *y = b;

        if (x->vaddr != y->vaddr)
                return x->vaddr < y->vaddr ? -1 : 1;
        return strcmp(x->raw, y->raw);
}

static void dedup(struct symtab *st)
{
        size_t w = 0;

        for (size_t i = 0; i < st->n; i++) {
                if (w && st->syms[w - 1].vaddr == st->syms[i].vaddr &&
                    strcmp(st->syms[w - 1].raw, st->syms[i].raw) == 0) {
                        free(st->syms[i].raw);
                        free(st->syms[i].name);
                        continue;
                }
                st->syms[w++] = st->syms[i];
        }
        st->n = w;
}

int symtab_load(const struct elf_image *img, const char *root, struct symtab *st)
{
        size_t cap = 0;
        int r;

        memset(st, 0, sizeof(*st));
        r = load_image(img, st, &cap, &st->from_symtab);
        if (r < 0)
                return r;
        if (!st->from_symtab) {
                st->debug_path = debug_file_find(img, root);
                if (st->debug_path) {
                        struct elf_image *dbg = NULL;

                        if (d9_elf_image_open(st->debug_path, &dbg, NULL) == 0) {
                                r = load_image(dbg, st, &cap, &st->from_symtab);
                                d9_elf_image_free(dbg);
                                if (r < 0)
                                        return r;
                        }
                }
        }
        if (st->n) {
                qsort(st->syms, st->n, sizeof(*st->syms), by_addr);
                dedup(st);
        }
        return 0;
}

void symtab_free(struct symtab *st)
{
        for (size_t i = 0; i < st->n; i++) {
                free(st->syms[i].raw);
                free(st->syms[i].name);
        }
        free(st->syms);
        free(st->debug_path);
        memset(st, 0, sizeof(*st));
}

const char *func_sym_name(struct func_sym *s)
{
        if (!s->name)
                s->name = rust_demangle_normalized(s->raw, &s->v0);
        return s->name ? s->name : s->raw;
}

struct func_sym *symtab_lookup(const struct symtab *st, uint64_t addr)
{
        size_t lo = 0, hi = st->n;

        /* Last symbol starting at or before addr. */
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;

                if (st->syms[mid].vaddr <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (!lo)
                return NULL;
        struct func_sym *s = &st->syms[lo - 1];

        if (s->vaddr == addr || addr - s->vaddr < s->size)
                return s;
        return NULL;
}
