/* elfsym: the function symbols of one ELF file and their names, the one
 * symbol table the probe planner (uprobes/) and the sealer
 * (daemon/symbolize/) both read, so a function has one name in a plan, a
 * task label and a sealed stack frame.
 *
 * A table collects the STT_FUNC entries of .symtab and .dynsym of one or
 * more Elf handles (a file and its separate debug file), sorted by
 * link-time address with exact duplicates dropped. Names are demangled on
 * first use: a large Rust binary has 100k+ symbols and a seal names a few
 * hundred of them. Every bound here holds against a hostile file.
 *
 * d9_addr_names answers the same lookups for a set of addresses known in
 * advance (a seal's frames) without building the table: memory in the
 * number of addresses, not of symbols.
 *
 * Not here: mapping runtime addresses to files (daemon/symbolize), finding
 * debug files (uprobes/debug_file.c), and the unwinder's names, which come
 * from the libdwfl module it already holds (daemon/record/unwind.c). */
#pragma once

#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longer names are not taken (no Rust name comes near). */
#define D9_SYM_NAME_MAX 4096
/* A table holds at most this many symbols of a file, and d9_addr_names
 * reads no more of one section: the largest binaries seen have ~1M. */
#define D9_SYMS_MAX (4u << 20)

/* The symbols both the table and d9_addr_names take: defined functions
 * at a nonzero address. */
static inline bool d9_sym_is_function(const GElf_Sym *sym)
{
        return GELF_ST_TYPE(sym->st_info) == STT_FUNC && sym->st_shndx != SHN_UNDEF && sym->st_value;
}

struct d9_sym {
        uint64_t vaddr, size;   /* link-time address; size 0 when unknown */
        char *raw;              /* as in the symbol table */
        char *name;             /* demangled; NULL until d9_sym_name() */
        bool v0;                /* raw uses Rust's v0 mangling */
};

struct d9_sym_table {
        struct d9_sym *syms;    /* sorted by vaddr, then raw, after d9_sym_table_sort() */
        size_t n, cap;
};

/* Appends the defined, nonzero function symbols of elf's .symtab and
 * .dynsym. *has_symtab (may be NULL) becomes true when a .symtab gave at
 * least one. Returns how many were added or a negative errno (-ENOMEM;
 * -E2BIG: more symbols, or more name bytes, than a real build has); on
 * error what was added before stays in the table. */
int d9_sym_table_add_elf(struct d9_sym_table *t, Elf *elf, bool *has_symtab);
/* Sorts and drops entries with the same address and raw name. */
void d9_sym_table_sort(struct d9_sym_table *t);
void d9_sym_table_free(struct d9_sym_table *t);

/* The symbol whose [vaddr, vaddr + size) holds addr; a size-0 symbol only
 * at its own address (what the planner asks about code it decodes). */
struct d9_sym *d9_sym_table_find(const struct d9_sym_table *t, uint64_t addr);
/* The same, but a size-0 symbol names everything up to the next symbol
 * (what a stack frame in hand-written assembly needs). */
struct d9_sym *d9_sym_table_find_nearest(const struct d9_sym_table *t, uint64_t addr);

/* Names for the link-time addresses vaddrs (any order, repeats allowed):
 * what d9_sym_table_find_nearest() would give for a table of the same
 * Elf handles added in the same order, read in one pass over each symbol
 * section in 64 KiB chunks plus one read per matched name. */
struct d9_addr_names;
int d9_addr_names_new(const uint64_t *vaddrs, size_t n, struct d9_addr_names **out);
/* Like d9_sym_table_add_elf; fd is the file elf was opened from, read with
 * pread (-1: elf is an elf_memory image). Returns 0 or a negative errno. */
int d9_addr_names_add_elf(struct d9_addr_names *an, Elf *elf, int fd, bool *has_symtab);
/* The demangled name and size of the symbol naming vaddr (one of those
 * given to _new), or NULL. The name is owned by an. */
const char *d9_addr_names_find_nearest(struct d9_addr_names *an, uint64_t vaddr, uint64_t *size);
void d9_addr_names_free(struct d9_addr_names *an);

/* The demangled name (demangled and kept on first use); the raw name if
 * memory runs out. */
const char *d9_sym_name(struct d9_sym *s);

/* Demangled text of a symbol name (malloc'd; NULL only on ENOMEM). Rust
 * names (legacy `_ZN...17h<hash>E` and v0 `_R...`) lose their hash, crate
 * disambiguators and LLVM clone suffixes (`.llvm.N`, `.cold`), so one
 * function has one name whatever the build; C++ names are demangled with
 * their parameters; anything else comes back as it is. *is_v0 (may be
 * NULL): the name uses Rust's v0 mangling. */
char *d9_sym_demangle(const char *raw, bool *is_v0);
/* Whether a symbol names code that is not its function's entry although
 * it demangles to the function's name: a part split off to run cold
 * (`.cold`, `.cold.N`: LLVM's, GCC's and BOLT's splitting), or the
 * original copy of a function BOLT moved (`.org.N`), whose first
 * instruction now jumps to the moved body. */
bool d9_sym_not_an_entry(const char *raw);
