/* addr_names (uprobes/elfsym/addr_names.c): addresses named without the
 * symbol table get exactly what the table's d9_sym_table_find_nearest()
 * gives, name and size: thousands of addresses (symbol starts, insides,
 * ends, gaps, below the first and past the last symbol, random ones) of a
 * stripped Rust target with its debug file and of symbolized ones, and of
 * this executable, whose own symbols carry each rule the two must share:
 * aliases at one address with different sizes, a size-0 function, code
 * past a function's end, names too long to take. Then the sealer's
 * symbolizer (symbolizer_new_for_addrs) against the full one on this
 * process's executable mappings (itself, libc, the vDSO).
 *
 * Usage: addr-names STRIPPED DEBUG_FILE SYMBOLIZED... */
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/symbolize/symbolize.h"
#include "tests/tap.h"
#include "uprobes/elfsym/elfsym.h"

#define L16 "llllllllllllllll"
#define L64 L16 L16 L16 L16
#define L256 L64 L64 L64 L64
#define L1024 L256 L256 L256 L256
/* 4105 bytes: not taken. 4096 bytes: taken. */
#define NAME_TOO_LONG "d9t_long_" L1024 L1024 L1024 L1024
#define NAME_LONGEST "d9t_max_" L1024 L1024 L1024 L256 L256 L256 L64 L64 L64 L16 L16 L16 "llllllll"

/* Three names at one address, listed out of name order (locals keep
 * theirs; the linker sorts globals), with different sizes: the last by
 * name (alias_c, 8 bytes) decides, so 16 bytes in is no function, though
 * alias_b, listed first, would say 32. Then a size-0 function that
 * names the code after it; outer, with a function of unusable name inside
 * (outer names it) and one of the longest usable name; short, followed by
 * code no symbol covers. */
__asm__(".text\n.p2align 6\n"
        ".type d9t_alias_b, @function\nd9t_alias_b:\n"
        ".type d9t_alias_c, @function\nd9t_alias_c:\n"
        ".globl d9t_alias_a\n.type d9t_alias_a, @function\nd9t_alias_a:\n"
        ".fill 48, 1, 0x90\n"
        ".size d9t_alias_b, 32\n.size d9t_alias_c, 8\n"
        ".globl d9t_unsized\n.type d9t_unsized, @function\nd9t_unsized:\n.fill 32, 1, 0x90\n"
        ".globl d9t_outer\n.type d9t_outer, @function\nd9t_outer:\n.fill 16, 1, 0x90\n"
        ".type \"" NAME_TOO_LONG "\", @function\n\"" NAME_TOO_LONG "\":\n.fill 16, 1, 0x90\n"
        ".size \"" NAME_TOO_LONG "\", 8\n"
        ".type \"" NAME_LONGEST "\", @function\n\"" NAME_LONGEST "\":\n.fill 32, 1, 0x90\n"
        ".size \"" NAME_LONGEST "\", 8\n.size d9t_outer, 64\n"
        ".globl d9t_short\n.type d9t_short, @function\nd9t_short:\n.fill 4, 1, 0x90\n.size d9t_short, 4\n"
        ".fill 28, 1, 0xcc\nret\n");
void d9t_alias_a(void);

struct elf_file {
        int fd;
        Elf *elf;
};

static struct elf_file elf_file_open(const char *path)
{
        struct elf_file f = { .fd = open(path, O_RDONLY | O_CLOEXEC) };

        f.elf = f.fd >= 0 ? elf_begin(f.fd, ELF_C_READ, NULL) : NULL;
        if (!f.elf)
                bail("cannot read %s as ELF", path);
        return f;
}

static void elf_file_close(struct elf_file *f)
{
        elf_end(f->elf);
        close(f->fd);
}

/* Both lookups loaded as the symbolizer loads them: the file, then its
 * debug file (may be NULL) when the file has no .symtab. */
static void load_both(const char *path, const char *debug, struct d9_sym_table *t, struct d9_addr_names *an)
{
        struct elf_file f = elf_file_open(path);
        bool t_symtab = false, an_symtab = false;

        d9_sym_table_add_elf(t, f.elf, &t_symtab);
        ok(d9_addr_names_add_elf(an, f.elf, f.fd, &an_symtab) == 0 && t_symtab == an_symtab,
           "%s: has a .symtab for both (%d)", path, t_symtab);
        elf_file_close(&f);
        if (!t_symtab && debug) {
                f = elf_file_open(debug);
                d9_sym_table_add_elf(t, f.elf, NULL);
                ok(d9_addr_names_add_elf(an, f.elf, f.fd, NULL) == 0, "%s: debug file read", debug);
                elf_file_close(&f);
        }
        d9_sym_table_sort(t);
}

struct samples {
        uint64_t *v;
        size_t n;
};

static void sample(struct samples *s, uint64_t a)
{
        if (a && s->n < 16384)
                s->v[s->n++] = a;
}

static uint64_t xorshift(uint64_t *x)
{
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

/* Starts, insides, ends and gaps of about max_syms symbols, below the
 * first and past the last, and 1000 random addresses over all of them. */
static struct samples samples_of(const struct d9_sym_table *t, size_t max_syms)
{
        struct samples s = { calloc(16384, sizeof(uint64_t)), 0 };
        size_t stride = t->n / max_syms + 1;
        uint64_t lo, hi, x = 0x9e3779b97f4a7c15ull;

        if (!s.v || !t->n)
                bail("no symbols to sample");
        lo = t->syms[0].vaddr;
        hi = t->syms[t->n - 1].vaddr + t->syms[t->n - 1].size;
        for (size_t i = 0; i < t->n; i += stride) {
                const struct d9_sym *y = &t->syms[i];

                sample(&s, y->vaddr);
                sample(&s, y->vaddr + 1);
                sample(&s, y->vaddr + y->size / 2);
                sample(&s, y->vaddr + y->size);
                sample(&s, y->vaddr + y->size + 3);
                if (i + 1 < t->n && t->syms[i + 1].vaddr > y->vaddr + 1)
                        sample(&s, t->syms[i + 1].vaddr - 1);
        }
        sample(&s, lo - 1);
        sample(&s, lo > 4096 ? lo - 4096 : 1);
        sample(&s, hi + 100);
        sample(&s, hi + (1u << 20));
        for (int i = 0; i < 1000; i++)
                sample(&s, lo - 64 + xorshift(&x) % (hi - lo + 4096));
        return s;
}

/* How often the table's answer came from each rule, so a test that
 * passes has also asked about them. */
struct rule_counts {
        size_t named, size0_beyond_start, past_sized_end, alias_won, below_all;
};

static void count_rule(const struct d9_sym_table *t, uint64_t a, const struct d9_sym *s, struct rule_counts *c)
{
        c->named += s != NULL;
        c->size0_beyond_start += s && !s->size && a > s->vaddr;
        c->alias_won += s && s > t->syms && s[-1].vaddr == s->vaddr;
        c->past_sized_end += !s && t->syms[0].vaddr <= a;
        c->below_all += a < t->syms[0].vaddr;
}

/* Every sample (or every step-th) named alike by both; the table's rules
 * counted into c. */
static void compare(const char *what, struct d9_sym_table *t, const struct samples *s, size_t step,
                    const char *path, const char *debug, struct rule_counts *c)
{
        struct d9_sym_table t2 = { 0 };
        struct d9_addr_names *an = NULL;
        uint64_t *want = calloc(s->n + 1, sizeof(*want));
        size_t n = 0, differ = 0;

        for (size_t i = 0; want && i < s->n; i += step)
                want[n++] = s->v[i];
        if (!want || d9_addr_names_new(want, n, &an) < 0)
                bail("out of memory");
        load_both(path, debug, &t2, an);
        d9_sym_table_free(&t2);
        for (size_t i = 0; i < n; i++) {
                struct d9_sym *y = d9_sym_table_find_nearest(t, want[i]);
                const char *exp = y ? d9_sym_name(y) : NULL;
                uint64_t size = ~0ull;
                const char *got = d9_addr_names_find_nearest(an, want[i], &size);

                if (c)
                        count_rule(t, want[i], y, c);
                if ((!exp != !got) || (exp && (strcmp(exp, got) || size != y->size))) {
                        if (differ++ < 5)
                                diag("0x%llx: table %.80s (%llu bytes), names %.80s (%llu bytes)",
                                     (unsigned long long)want[i], exp ? exp : "NULL",
                                     (unsigned long long)(y ? y->size : 0), got ? got : "NULL",
                                     (unsigned long long)size);
                }
        }
        ok(differ == 0, "%s: %zu addresses named as the table names them (%zu differ)", what, n, differ);
        d9_addr_names_free(an);
        free(want);
}

static void check_file(const char *path, const char *debug, size_t max_syms, struct rule_counts *c)
{
        struct d9_sym_table t = { 0 };
        struct d9_addr_names *an = NULL;
        struct samples s;
        char what[256];

        /* The table alone first, for the samples. */
        if (d9_addr_names_new(NULL, 0, &an) < 0)
                bail("out of memory");
        load_both(path, debug, &t, an);
        d9_addr_names_free(an);
        diag("%s: %zu function symbols", path, t.n);
        s = samples_of(&t, max_syms);
        snprintf(what, sizeof(what), "%s%s", path, debug ? " with its debug file" : "");
        compare(what, &t, &s, 1, path, debug, c);
        /* Few addresses: wide gaps, a symbol many gaps below. */
        snprintf(what, sizeof(what), "%s, every 97th", path);
        compare(what, &t, &s, 97, path, debug, NULL);
        free(s.v);
        d9_sym_table_free(&t);
}

/* This executable: each rule must have been asked about. */
static void check_self(void)
{
        struct rule_counts c = { 0 };

        check_file("/proc/self/exe", NULL, 1u << 20, &c);
        ok(c.size0_beyond_start && c.past_sized_end && c.alias_won && c.below_all,
           "asked past a size-0 start (%zu), past a sized end (%zu), where an alias won (%zu), below all (%zu)",
           c.size0_beyond_start, c.past_sized_end, c.alias_won, c.below_all);
}

/* A file no linker writes: .dynsym before .symtab repeating a name at
 * one address with another size (the first added, .dynsym's, decides),
 * a repeat inside .symtab, aliases out of name order, names that are
 * empty, unterminated or past the string table (each hides a symbol, so
 * the one below names the address), and what is no defined function. */
static const char crafted_strtab[] = "\0dup\0twin\0b\0c\0a\0cover\0cover2\0cover3\0obj\0undef\0zero\0tail";

static Elf64_Sym crafted_sym(const char *name, uint64_t vaddr, uint64_t size, int type, uint16_t shndx)
{
        const char *at = name ? memmem(crafted_strtab, sizeof(crafted_strtab) - 1, name, strlen(name) + !!strcmp(name, "tail")) : NULL;

        return (Elf64_Sym){ .st_name = at ? (uint32_t)(at - crafted_strtab) : 99999, .st_value = vaddr,
                            .st_size = size, .st_info = ELF64_ST_INFO(STB_GLOBAL, type), .st_shndx = shndx };
}

static char *crafted_elf(void)
{
        Elf64_Sym dyn[] = { { 0 }, crafted_sym("dup", 0x1000, 16, STT_FUNC, 1) };
        Elf64_Sym sym[] = {
                { 0 },
                crafted_sym("dup", 0x1000, 64, STT_FUNC, 1),
                crafted_sym("twin", 0x3000, 8, STT_FUNC, 1), crafted_sym("twin", 0x3000, 40, STT_FUNC, 1),
                crafted_sym("b", 0x4000, 48, STT_FUNC, 1), crafted_sym("c", 0x4000, 8, STT_FUNC, 1),
                crafted_sym("a", 0x4000, 0, STT_FUNC, 1),
                crafted_sym("cover", 0x4f00, 0x200, STT_FUNC, 1), crafted_sym("", 0x5000, 0, STT_FUNC, 1),
                crafted_sym("cover2", 0x5f00, 0x200, STT_FUNC, 1), crafted_sym("tail", 0x6000, 0, STT_FUNC, 1),
                crafted_sym("cover3", 0x6f00, 0x200, STT_FUNC, 1), crafted_sym(NULL, 0x7000, 0, STT_FUNC, 1),
                crafted_sym("obj", 0x7f00, 0, STT_OBJECT, 1), crafted_sym("undef", 0x7f80, 0, STT_FUNC, SHN_UNDEF),
                crafted_sym("zero", 0, 0x10000, STT_FUNC, 1),
        };
        static const char shstr[] = "\0.strtab\0.dynsym\0.symtab\0.shstrtab";
        /* The empty name: a NUL that is not the first byte. */
        sym[8].st_name = 4;
        size_t str_off = sizeof(Elf64_Ehdr), dyn_off = 256, sym_off = dyn_off + sizeof(dyn),
               shstr_off = sym_off + sizeof(sym), sh_off = (shstr_off + sizeof(shstr) + 7) & ~7ul;
        Elf64_Shdr sh[5] = {
                { 0 },
                { .sh_name = 1, .sh_type = SHT_STRTAB, .sh_offset = str_off, .sh_size = sizeof(crafted_strtab) - 1 },
                { .sh_name = 9, .sh_type = SHT_DYNSYM, .sh_offset = dyn_off, .sh_size = sizeof(dyn), .sh_link = 1,
                  .sh_entsize = sizeof(Elf64_Sym), .sh_addralign = 8 },
                { .sh_name = 17, .sh_type = SHT_SYMTAB, .sh_offset = sym_off, .sh_size = sizeof(sym), .sh_link = 1,
                  .sh_entsize = sizeof(Elf64_Sym), .sh_addralign = 8 },
                { .sh_name = 25, .sh_type = SHT_STRTAB, .sh_offset = shstr_off, .sh_size = sizeof(shstr) },
        };
        Elf64_Ehdr eh = { .e_ident = { ELFMAG0, ELFMAG1, ELFMAG2, ELFMAG3, ELFCLASS64, ELFDATA2LSB, EV_CURRENT },
                          .e_type = ET_DYN, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
                          .e_ehsize = sizeof(eh), .e_shoff = sh_off, .e_shentsize = sizeof(Elf64_Shdr),
                          .e_shnum = 5, .e_shstrndx = 4 };
        static char path[] = "/tmp/d9-addr-names-XXXXXX";
        int fd = mkstemp(path);

        if (fd < 0 || pwrite(fd, &eh, sizeof(eh), 0) != sizeof(eh) ||
            pwrite(fd, crafted_strtab, sizeof(crafted_strtab) - 1, (off_t)str_off) != sizeof(crafted_strtab) - 1 ||
            pwrite(fd, dyn, sizeof(dyn), (off_t)dyn_off) != sizeof(dyn) ||
            pwrite(fd, sym, sizeof(sym), (off_t)sym_off) != sizeof(sym) ||
            pwrite(fd, shstr, sizeof(shstr), (off_t)shstr_off) != sizeof(shstr) ||
            pwrite(fd, sh, sizeof(sh), (off_t)sh_off) != sizeof(sh))
                bail("cannot write %s", path);
        close(fd);
        return path;
}

static void check_crafted(void)
{
        char *path = crafted_elf();
        struct d9_sym_table t = { 0 };
        struct d9_addr_names *an = NULL;
        struct samples s = { calloc(16384, sizeof(uint64_t)), 0 };
        struct rule_counts c = { 0 };

        if (!s.v || d9_addr_names_new(NULL, 0, &an) < 0)
                bail("out of memory");
        load_both(path, NULL, &t, an);
        d9_addr_names_free(an);
        for (uint64_t a = 0xf00; a < 0x9000; a += 4)
                sample(&s, a);
        compare("crafted .dynsym + .symtab", &t, &s, 1, path, NULL, &c);
        ok(t.n == 8 && c.alias_won && c.past_sized_end, "crafted: 8 symbols taken (%zu), rules asked", t.n);
        d9_sym_table_free(&t);
        free(s.v);
        unlink(path);
}

/* The sealer's symbolizer against the full one, on this process. */
static void check_symbolizer(void)
{
        char *maps = symbolizer_read_proc_text("/proc/self/maps");
        struct samples s = { calloc(16384, sizeof(uint64_t)), 0 };
        uint64_t x = 0x2545f4914f6cdd1dull;
        struct symbolizer *full, *known;
        size_t differ = 0, named = 0;

        if (!maps || !s.v)
                bail("no /proc/self/maps");
        for (int k = 0; k < 100; k++)
                sample(&s, (uint64_t)(uintptr_t)d9t_alias_a + (uint64_t)k);
        for (const char *line = maps; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
                unsigned long long a, b;
                char perms[8];

                if (sscanf(line, "%llx-%llx %7s", &a, &b, perms) != 3 || perms[2] != 'x')
                        continue;
                for (int i = 0; i < 1500; i++)
                        sample(&s, a + xorshift(&x) % (b - a));
        }
        full = symbolizer_new(getpid(), maps);
        known = symbolizer_new_for_addrs(-1, maps, s.v, s.n);
        if (!full || !known)
                bail("no symbolizer");
        for (size_t i = 0; i < s.n; i++) {
                uint64_t size_f = 1, size_k = 2;
                const char *f = symbolizer_lookup(full, s.v[i], &size_f);
                const char *k = symbolizer_lookup(known, s.v[i], &size_k);

                named += f != NULL;
                if ((!f != !k) || (f && (strcmp(f, k) || size_f != size_k)))
                        if (differ++ < 5)
                                diag("0x%llx: full %.80s, known %.80s", (unsigned long long)s.v[i], f ? f : "NULL",
                                     k ? k : "NULL");
        }
        ok(differ == 0 && named, "symbolizer_new_for_addrs names %zu addresses of this process as "
           "symbolizer_new does (%zu named, %zu differ)", s.n, named, differ);
        const char *alias = symbolizer_lookup(known, (uint64_t)(uintptr_t)d9t_alias_a, &(uint64_t){ 0 });
        ok(alias && !strcmp(alias, "d9t_alias_c"), "this executable's aliases: the last by name (got %s)",
           alias ? alias : "NULL");
        uint64_t other = (uint64_t)(uintptr_t)check_symbolizer + 3, size = 0;
        bool given = false;

        for (size_t i = 0; i < s.n; i++)
                given |= s.v[i] == other;
        ok(given || (symbolizer_lookup(full, other, &size) && !symbolizer_lookup(known, other, &size)),
           "an address it was not given: no name");
        symbolizer_free(full);
        symbolizer_free(known);
        free(s.v);
        free(maps);
}

int main(int argc, char **argv)
{
        if (argc < 4)
                bail("usage: %s STRIPPED DEBUG_FILE SYMBOLIZED...", argv[0]);
        elf_version(EV_CURRENT);
        check_self();
        check_crafted();
        check_file(argv[1], argv[2], 600, NULL);
        for (int i = 3; i < argc; i++)
                check_file(argv[i], NULL, 600, NULL);
        check_symbolizer();
        return tap_done();
}
