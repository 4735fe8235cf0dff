/* relocs: the relative relocations of a position-independent executable,
 * which say where its pointers to its own code and data are and what they
 * point to: R_X86_64_RELATIVE entries of .rela.dyn (addend = target) or the
 * bitmaps of .relr.dyn (target = the word already in the file). Binaries
 * whose section headers were removed find the tables through PT_DYNAMIC.
 * Non-PIE binaries have none: their pointers are plain words in the file,
 * which uprobes_relocs_from_words lists the same way for one section.
 * The task vtable scan (vtable_scan.c), the waker scan and the boxed-future
 * poll names (plan_dyn_names.c) all read this one list. */
#include <errno.h>
#include <string.h>

#include "uprobes_int.h"

static int reloc_push(struct reloc_list *l, uint64_t where, uint64_t value)
{
        if (l->n == l->cap) {
                size_t ncap = l->cap ? l->cap * 2 : 8192;
                struct reloc *n = realloc(l->r, ncap * sizeof(*n));

                if (!n)
                        return -ENOMEM;
                l->r = n;
                l->cap = ncap;
        }
        l->r[l->n++] = (struct reloc){ where, value };
        return 0;
}

#ifndef DT_RELRSZ
#define DT_RELRSZ 35
#define DT_RELR 36
#endif

/* A relocation table from the dynamic segment (DT_RELA/DT_RELASZ, ...), for
 * binaries whose section headers were removed (sstrip and the like). */
static const uint8_t *dynamic_table(const struct elf_image *img, int64_t tag_addr, int64_t tag_size,
                                    size_t *size)
{
        uint64_t addr = 0, sz = 0;
        size_t n;

        if (elf_getphdrnum(img->elf, &n) < 0)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;

                if (!gelf_getphdr(img->elf, (int)i, &ph) || ph.p_type != PT_DYNAMIC)
                        continue;
                for (uint64_t off = 0; off + 16 <= ph.p_filesz; off += 16) {
                        const uint8_t *e = d9_elf_vaddr_bytes(img, ph.p_vaddr + off, 16);
                        int64_t tag;
                        uint64_t val;

                        if (!e)
                                break;
                        memcpy(&tag, e, 8);
                        memcpy(&val, e + 8, 8);
                        if (tag == DT_NULL)
                                break;
                        if (tag == tag_addr)
                                addr = val;
                        else if (tag == tag_size)
                                sz = val;
                }
        }
        if (!addr || !sz)
                return NULL;
        *size = sz;
        return d9_elf_vaddr_bytes(img, addr, sz);
}

/* Section by name, else the dynamic segment's entry for the same table. */
static const uint8_t *reloc_table(const struct elf_image *img, const char *section, int64_t tag_addr,
                                  int64_t tag_size, size_t *size)
{
        const uint8_t *d = d9_elf_section_data(img, section, size, NULL);

        return d ? d : dynamic_table(img, tag_addr, tag_size, size);
}

static int collect_rela(const struct elf_image *img, struct reloc_list *l)
{
        size_t size;
        const uint8_t *d = reloc_table(img, ".rela.dyn", DT_RELA, DT_RELASZ, &size);

        if (!d)
                return 0;
        for (size_t off = 0; off + sizeof(Elf64_Rela) <= size; off += sizeof(Elf64_Rela)) {
                Elf64_Rela rel;

                memcpy(&rel, d + off, sizeof(rel));
                if (ELF64_R_TYPE(rel.r_info) != R_X86_64_RELATIVE)
                        continue;
                if (reloc_push(l, rel.r_offset, (uint64_t)rel.r_addend) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* RELR: the addend is the word already in the file at the relocated place. */
static int relr_apply(const struct elf_image *img, struct reloc_list *l, uint64_t where)
{
        const uint8_t *p = d9_elf_vaddr_bytes(img, where, 8);
        uint64_t v;

        if (!p)
                return 0;
        memcpy(&v, p, 8);
        return reloc_push(l, where, v);
}

static int collect_relr(const struct elf_image *img, struct reloc_list *l)
{
        size_t size;
        const uint8_t *d = reloc_table(img, ".relr.dyn", DT_RELR, DT_RELRSZ, &size);
        uint64_t base = 0;

        if (!d)
                return 0;
        for (size_t off = 0; off + 8 <= size; off += 8) {
                uint64_t e;

                memcpy(&e, d + off, 8);
                if (!(e & 1)) {
                        if (relr_apply(img, l, e) < 0)
                                return -ENOMEM;
                        base = e + 8;
                        continue;
                }
                for (int bit = 1; bit < 64; bit++)
                        if ((e >> bit) & 1 && relr_apply(img, l, base + (uint64_t)(bit - 1) * 8) < 0)
                                return -ENOMEM;
                base += 63 * 8;
        }
        return 0;
}

static int by_where(const void *a, const void *b)
{
        const struct reloc *x = a, *y = b;

        return x->where < y->where ? -1 : x->where > y->where;
}

int uprobes_relocs_collect(const struct elf_image *img, struct reloc_list *l)
{
        int r;

        memset(l, 0, sizeof(*l));
        r = collect_rela(img, l);
        if (r == 0)
                r = collect_relr(img, l);
        if (r < 0) {
                uprobes_relocs_free(l);
                return r;
        }
        if (l->n) {
                qsort(l->r, l->n, sizeof(*l->r), by_where);
                l->method = reloc_table(img, ".relr.dyn", DT_RELR, DT_RELRSZ, &(size_t){ 0 }) ? "relr.dyn"
                                                                                             : "rela.dyn";
        }
        return 0;
}

int uprobes_relocs_from_words(const struct elf_image *img, const char *section, struct reloc_list *l)
{
        size_t size;
        uint64_t addr;
        const uint8_t *d = d9_elf_section_data(img, section, &size, &addr);

        memset(l, 0, sizeof(*l));
        for (size_t off = d ? (8 - addr % 8) % 8 : 0; d && off + 8 <= size; off += 8) {
                uint64_t w;

                memcpy(&w, d + off, 8);
                if (d9_elf_vaddr_is_exec(img, w) && reloc_push(l, addr + off, w) < 0) {
                        uprobes_relocs_free(l);
                        return -ENOMEM;
                }
        }
        l->method = l->n ? section : NULL;
        return 0;
}

const struct reloc *uprobes_reloc_at(const struct reloc_list *l, uint64_t where)
{
        struct reloc key = { where, 0 };

        return l->n ? bsearch(&key, l->r, l->n, sizeof(*l->r), by_where) : NULL;
}

void uprobes_relocs_free(struct reloc_list *l)
{
        free(l->r);
        memset(l, 0, sizeof(*l));
}
