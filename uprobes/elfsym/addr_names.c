/* addr_names: names for a known set of link-time addresses, with the
 * answer d9_sym_table_find_nearest() gives, but without the table.
 *
 * A seal names a few hundred addresses; a big Rust build keeps 200k
 * function symbols whose table (copied names, sorted array, libelf's
 * buffers of .symtab and .strtab) costs 60+ MiB for a second. Here each
 * symbol section is read once from the file in bounded chunks, and each
 * gap between two wanted addresses keeps only the highest symbol address
 * in it with the symbols there (aliases): the nearest symbol at or below
 * a wanted address is the best of its own gap or, if that is empty, of
 * the closest gap below. Only those symbols' names are read from the
 * string table, one pread each, so memory grows with the wanted
 * addresses, not with the file.
 *
 * The table's rules, kept: STT_FUNC, defined, nonzero value, a name of
 * 1..D9_SYM_NAME_MAX bytes ending inside its string table; among symbols
 * at one address the last by name wins; of exact duplicates (same
 * address and name, e.g. .dynsym repeating .symtab) the first added, in
 * section order then symbol order, gives the size; a size-0 winner names
 * everything up to the next symbol. A hostile file (the target's, so any
 * local user's) bounds the work instead: at most D9_SYMS_MAX symbols of
 * a section are read (the table's own cap), ALIASES_MAX names at one
 * address weighed, and PASSES_MAX passes made for addresses whose names
 * are all unusable; past those an address may get another name or none
 * where the table would have given one. */
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elfsym.h"

#define CHUNK_BYTES (64u << 10)
#define ALIASES_MAX 4096u               /* builds have a few at one address */
#define PASSES_MAX 8u                   /* builds need one */

/* The best symbol found in (want[i - 1], want[i]]. */
struct gap_best {
        uint64_t vaddr, size;
        char *raw;              /* NULL: no symbol in this gap */
        char *name;             /* demangled on first use */
};

struct d9_addr_names {
        uint64_t *want;         /* sorted, unique */
        struct gap_best *best;  /* one per want */
        size_t n;
};

/* Where a file's bytes come from: the descriptor, or the image of an
 * Elf made with elf_memory (the vDSO). */
struct elf_bytes {
        int fd;
        const char *image;
        uint64_t size;
};

/* One section's candidates for a gap: the symbols at the highest address
 * at or below ceil seen so far (aliases, in symbol order). */
struct alias {
        uint64_t size;
        uint32_t st_name;
};

struct gap_scan {
        uint64_t ceil;          /* lowered past an address whose names are all unusable */
        uint64_t vaddr;
        struct alias *aliases;
        size_t n, cap;
        bool pending;
};

struct symsec {
        Elf *elf;
        const struct elf_bytes *src;
        GElf_Shdr sh, strsh;
        size_t symsize;         /* in the file and in memory */
        bool is64, strtab_ok;
};

static int u64_cmp(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

int d9_addr_names_new(const uint64_t *vaddrs, size_t n, struct d9_addr_names **out)
{
        struct d9_addr_names *an = calloc(1, sizeof(*an));
        size_t u = 0;

        if (!an || !(an->want = malloc((n ? n : 1) * sizeof(*an->want)))) {
                free(an);
                return -ENOMEM;
        }
        if (n)
                memcpy(an->want, vaddrs, n * sizeof(*vaddrs));
        qsort(an->want, n, sizeof(*an->want), u64_cmp);
        for (size_t i = 0; i < n; i++)
                if (!u || an->want[u - 1] != an->want[i])
                        an->want[u++] = an->want[i];
        an->n = u;
        if (!(an->best = calloc(u ? u : 1, sizeof(*an->best)))) {
                d9_addr_names_free(an);
                return -ENOMEM;
        }
        *out = an;
        return 0;
}

void d9_addr_names_free(struct d9_addr_names *an)
{
        if (!an)
                return;
        for (size_t i = 0; i < an->n; i++) {
                free(an->best[i].raw);
                free(an->best[i].name);
        }
        free(an->best);
        free(an->want);
        free(an);
}

/* All of len bytes at off, or an error. (elfsym links nothing of d9d's
 * own, so not proto's d9_read_full.) */
static int bytes_read(const struct elf_bytes *src, void *buf, size_t len, uint64_t off)
{
        if (off > src->size || len > src->size - off)
                return -EIO;
        if (src->image) {
                memcpy(buf, src->image + off, len);
                return 0;
        }
        for (size_t done = 0; done < len;) {
                ssize_t r = pread(src->fd, (char *)buf + done, len - done, (off_t)(off + done));

                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return r < 0 ? -errno : -EIO;
                done += (size_t)r;
        }
        return 0;
}

/* The name elf_strptr() would give, if the table takes it: NUL-terminated
 * inside its string table, 1..D9_SYM_NAME_MAX bytes. malloc'd; NULL when
 * unusable or out of memory (-ENOMEM in *err). */
static char *section_name(const struct symsec *ss, uint32_t st_name, int *err)
{
        uint64_t left = ss->strsh.sh_size > st_name ? ss->strsh.sh_size - st_name : 0;
        size_t len = left > D9_SYM_NAME_MAX + 1 ? D9_SYM_NAME_MAX + 1 : (size_t)left;
        char *buf, *nul;

        if (!ss->strtab_ok || !len)
                return NULL;
        if (ss->strsh.sh_flags & SHF_COMPRESSED) {
                /* Never seen in a build; libelf inflates it as the table's reads do. */
                const char *s = elf_strptr(ss->elf, ss->sh.sh_link, st_name);
                size_t l = s ? strnlen(s, D9_SYM_NAME_MAX + 1) : 0;
                char *copy = l && l <= D9_SYM_NAME_MAX ? strdup(s) : NULL;

                *err = l && l <= D9_SYM_NAME_MAX && !copy ? -ENOMEM : *err;
                return copy;
        }
        if (!(buf = malloc(len))) {
                *err = -ENOMEM;
                return NULL;
        }
        nul = bytes_read(ss->src, buf, len, ss->strsh.sh_offset + st_name) == 0 ? memchr(buf, 0, len) : NULL;
        if (!nul || nul == buf) {
                free(buf);
                return NULL;
        }
        /* A gap keeps its winner's name: its length, not the read's. */
        return realloc(buf, (size_t)(nul - buf) + 1) ?: buf;
}

static bool scan_alias_add(struct gap_scan *g, uint64_t vaddr, const GElf_Sym *sym)
{
        if (g->n && vaddr < g->vaddr)
                return true;
        if (g->n && vaddr > g->vaddr)
                g->n = 0;
        if (g->n == ALIASES_MAX)
                return true;
        if (g->n == g->cap) {
                size_t ncap = g->cap ? 2 * g->cap : 4;
                struct alias *more = realloc(g->aliases, ncap * sizeof(*more));

                if (!more)
                        return false;
                g->aliases = more;
                g->cap = ncap;
        }
        g->vaddr = vaddr;
        g->aliases[g->n++] = (struct alias){ sym->st_size, sym->st_name };
        return true;
}

/* The first gap whose wanted address is at or above vaddr (n if none). */
static size_t gap_of(const struct d9_addr_names *an, uint64_t vaddr)
{
        size_t lo = 0, hi = an->n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (an->want[mid] < vaddr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static GElf_Sym sym_at(const struct symsec *ss, const char *p)
{
        GElf_Sym s;

        if (ss->is64) {
                memcpy(&s, p, sizeof(s));
        } else {
                Elf32_Sym t;

                memcpy(&t, p, sizeof(t));
                s = (GElf_Sym){ t.st_name, t.st_info, t.st_other, t.st_shndx, t.st_value, t.st_size };
        }
        return s;
}

/* Entries gelf_getsym() would read: sh_entsize says how many, the data
 * how many fit. */
static uint64_t section_count(const struct symsec *ss)
{
        uint64_t count = ss->sh.sh_entsize ? ss->sh.sh_size / ss->sh.sh_entsize : 0;

        return count < ss->sh.sh_size / ss->symsize ? count : ss->sh.sh_size / ss->symsize;
}

/* k entries from index first, in memory form, into chunk. */
static int chunk_read(const struct symsec *ss, char *chunk, uint64_t first, size_t k)
{
        size_t len = k * ss->symsize;
        Elf_Data dst = { .d_buf = chunk, .d_type = ELF_T_SYM, .d_size = len, .d_version = EV_CURRENT };
        Elf_Data src = dst;
        int r = bytes_read(ss->src, chunk, len, ss->sh.sh_offset + first * ss->symsize);

        if (r < 0)
                return r;
        return gelf_xlatetom(ss->elf, &dst, &src, elf_getident(ss->elf, NULL)[EI_DATA]) ? 0 : -EINVAL;
}

/* Calls fn with each defined function symbol of the section, in symbol
 * order, one chunk read at a time; stops at fn's first nonzero answer and
 * returns it. */
static int section_each_func(const struct symsec *ss, char *chunk, int (*fn)(const GElf_Sym *sym, void *ctx),
                             void *ctx)
{
        uint64_t count = section_count(ss);
        size_t per_chunk = CHUNK_BYTES / ss->symsize;

        if (count > D9_SYMS_MAX)
                count = D9_SYMS_MAX;

        for (uint64_t first = 0; first < count; first += per_chunk) {
                size_t k = count - first < per_chunk ? (size_t)(count - first) : per_chunk;
                int r = chunk_read(ss, chunk, first, k);

                for (size_t j = 0; r == 0 && j < k; j++) {
                        GElf_Sym sym = sym_at(ss, chunk + j * ss->symsize);

                        if (d9_sym_is_function(&sym))
                                r = fn(&sym, ctx);
                }
                if (r)
                        return r;
        }
        return 0;
}

struct pass {
        const struct d9_addr_names *an;
        struct gap_scan *scan;
};

/* A symbol is a candidate of the gap it falls in while that gap waits
 * for one at or below its ceiling. */
static int pass_take(const GElf_Sym *sym, void *ctx)
{
        const struct pass *p = ctx;
        size_t g = gap_of(p->an, sym->st_value);

        if (g == p->an->n || !p->scan[g].pending || sym->st_value > p->scan[g].ceil)
                return 0;
        return scan_alias_add(&p->scan[g], sym->st_value, sym) ? 0 : -ENOMEM;
}

/* 1 once a function's name is usable. */
static int name_usable(const GElf_Sym *sym, void *ctx)
{
        int err = 0;
        char *raw = section_name(ctx, sym->st_name, &err);

        free(raw);
        return raw ? 1 : err;
}

/* The section's winner among a gap's aliases: the last usable name in
 * strcmp order, the first of equal ones; merged into the gap's best the
 * same way (earlier sections came first). *found: a name was usable. */
static int gap_settle(struct gap_best *best, const struct symsec *ss, const struct gap_scan *g, bool *found)
{
        char *win = NULL;
        uint64_t win_size = 0;
        int err = 0;

        for (size_t a = 0; a < g->n && !err; a++) {
                char *raw = section_name(ss, g->aliases[a].st_name, &err);

                if (raw && (!win || strcmp(raw, win) > 0)) {
                        free(win);
                        win = raw;
                        win_size = g->aliases[a].size;
                } else {
                        free(raw);
                }
        }
        *found = win != NULL;
        if (!err && win && (!best->raw || g->vaddr > best->vaddr ||
                            (g->vaddr == best->vaddr && strcmp(win, best->raw) > 0))) {
                free(best->raw);
                *best = (struct gap_best){ .vaddr = g->vaddr, .size = win_size, .raw = win };
                win = NULL;
        }
        free(win);
        return err;
}

/* Passes until every gap has a symbol with a usable name or none: an
 * address whose names are all unusable is dropped and the pass repeated
 * below it (rare: never seen in a build). */
static int section_settle(struct d9_addr_names *an, const struct symsec *ss, struct gap_scan *scan, char *chunk)
{
        unsigned passes = 0;

        for (size_t pending = an->n; pending && passes++ < PASSES_MAX;) {
                /* One streaming pass: each pending gap's highest symbol
                 * address at or below its ceiling, with every symbol there. */
                int r = section_each_func(ss, chunk, pass_take, &(struct pass){ an, scan });

                if (r < 0)
                        return r;
                pending = 0;
                for (size_t i = 0; i < an->n; i++) {
                        struct gap_scan *g = &scan[i];
                        bool found = false;

                        if (!g->pending)
                                continue;
                        if (g->n && (r = gap_settle(&an->best[i], ss, g, &found)) < 0)
                                return r;
                        g->pending = g->n && !found && g->vaddr - 1 > (i ? an->want[i - 1] : 0);
                        g->ceil = g->vaddr - 1;
                        g->n = 0;
                        pending += g->pending;
                }
        }
        return 0;
}

/* A section libelf would hand over whole (elf_getdata) and a string
 * table elf_strptr would read. */
static bool symsec_open(struct symsec *ss, Elf *elf, Elf_Scn *scn, const struct elf_bytes *src)
{
        Elf_Scn *strscn;

        *ss = (struct symsec){ .elf = elf, .src = src, .symsize = gelf_fsize(elf, ELF_T_SYM, 1, EV_CURRENT),
                               .is64 = gelf_getclass(elf) == ELFCLASS64 };
        if (!gelf_getshdr(scn, &ss->sh) || (ss->sh.sh_type != SHT_SYMTAB && ss->sh.sh_type != SHT_DYNSYM) ||
            !ss->symsize || ss->sh.sh_size % ss->symsize || (ss->sh.sh_flags & SHF_COMPRESSED) ||
            ss->sh.sh_offset > src->size || ss->sh.sh_size > src->size - ss->sh.sh_offset)
                return false;
        strscn = elf_getscn(elf, ss->sh.sh_link);
        ss->strtab_ok = strscn && gelf_getshdr(strscn, &ss->strsh) && ss->strsh.sh_type == SHT_STRTAB &&
                        ((ss->strsh.sh_flags & SHF_COMPRESSED) ||
                         (ss->strsh.sh_offset <= src->size && ss->strsh.sh_size <= src->size - ss->strsh.sh_offset));
        return true;
}

static int section_add(struct d9_addr_names *an, const struct symsec *ss, char *chunk)
{
        struct gap_scan *scan = calloc(an->n ? an->n : 1, sizeof(*scan));
        int r;

        if (!scan)
                return -ENOMEM;
        for (size_t i = 0; i < an->n; i++)
                scan[i] = (struct gap_scan){ .ceil = an->want[i], .pending = true };
        r = section_settle(an, ss, scan, chunk);
        for (size_t i = 0; i < an->n; i++)
                free(scan[i].aliases);
        free(scan);
        return r;
}

int d9_addr_names_add_elf(struct d9_addr_names *an, Elf *elf, int fd, bool *has_symtab)
{
        struct elf_bytes src = { .fd = fd };
        Elf_Scn *scn = NULL;
        struct stat st;
        char *chunk;
        int r = 0;

        if (fd >= 0 && fstat(fd, &st) == 0) {
                src.size = (uint64_t)st.st_size;
        } else if (fd < 0) {
                size_t size = 0;

                src.image = elf_rawfile(elf, &size);
                src.size = size;
        }
        if (!src.size)
                return 0;
        if (!(chunk = malloc(CHUNK_BYTES)))
                return -ENOMEM;
        while (r >= 0 && (scn = elf_nextscn(elf, scn))) {
                struct symsec ss;

                if (!symsec_open(&ss, elf, scn, &src))
                        continue;
                r = an->n ? section_add(an, &ss, chunk) : 0;
                /* The table takes a .symtab the moment one function has a
                 * usable name, so the first chunk nearly always tells. */
                if (r >= 0 && has_symtab && !*has_symtab && ss.sh.sh_type == SHT_SYMTAB &&
                    (r = section_each_func(&ss, chunk, name_usable, (void *)&ss)) > 0)
                        *has_symtab = true;
        }
        free(chunk);
        return r < 0 ? r : 0;
}

const char *d9_addr_names_find_nearest(struct d9_addr_names *an, uint64_t vaddr, uint64_t *size)
{
        size_t i = gap_of(an, vaddr);
        struct gap_best *b;

        if (i == an->n || an->want[i] != vaddr)
                return NULL;
        while (!an->best[i].raw && i)
                i--;
        b = &an->best[i];
        if (!b->raw || (b->size && vaddr - b->vaddr >= b->size))
                return NULL;
        if (!b->name)
                b->name = d9_sym_demangle(b->raw, NULL);
        *size = b->size;
        return b->name ? b->name : b->raw;
}
