/* symbolize: runtime address -> demangled function name for one target,
 * from a snapshot of its /proc/PID/maps (ELF .symtab/.dynsym via libelf)
 * and, for kernel addresses, /proc/kallsyms. Used by the sealer thread;
 * also describes the mappings (build-id, load bias) and the placeholder
 * names that let d9ctl symbolize name the rest later (resymbolize.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct symbolizer;

/* maps_text: contents of /proc/PID/maps taken while the target was alive
 * (may be NULL: only kernel addresses resolve). ELF files are opened via
 * /proc/PID/root when the process still exists, else by their plain path. */
struct symbolizer *symbolizer_new(pid_t pid, const char *maps_text);
/* What the sealer uses: names for addrs only (lookups of any other user
 * address give NULL), read without loading whole symbol tables, in the
 * target's root directory taken while it ran (root_fd, not taken over;
 * -1: plain paths, our own root), since by seal time /proc/PID may belong
 * to a new process. */
struct symbolizer *symbolizer_new_for_addrs(int root_fd, const char *maps_text, const uint64_t *addrs, size_t n);
void symbolizer_free(struct symbolizer *s);
/* Name for addr (owned by the symbolizer), or NULL if unknown. */
const char *symbolizer_lookup(struct symbolizer *s, uint64_t addr, uint64_t *size);

/* The file mappings the symbolizer knows (executable ones, from the maps
 * snapshot), for D9MappingEvent records: what is needed to name an address
 * later from a debug file found by build-id. */
struct sym_mapping {
        uint64_t start, end, offset;    /* runtime range and its file offset */
        bool bias_known;                /* the file's PT_LOAD headers were read */
        uint64_t bias;                  /* runtime address - link-time address */
        const char *path;               /* as in the maps (owned by the symbolizer) */
        const char *build_id;           /* lowercase hex, "" if unknown */
};
bool symbolizer_mapping(const struct symbolizer *s, size_t i, struct sym_mapping *out);
/* The placeholder name of an address in a mapping without a symbol for it:
 * "[unnamed] FILE 0xVADDR" with the link-time address (what addr2line -e
 * FILE takes, the same numbers stripped task labels use; mapping.h's
 * mapping_unnamed). False when addr is in no mapping. */
bool symbolizer_unnamed(const struct symbolizer *s, uint64_t addr, char *buf, size_t n);
/* Is addr in executable memory with no file behind it (JIT code)? */
bool symbolizer_in_anonymous_code(const struct symbolizer *s, uint64_t addr);

/* Symbols of one ELF file (a separate debug file): looked up by link-time
 * address or by file offset (through that file's PT_LOAD headers, which
 * debug files keep). NULL if the file cannot be opened. */
struct symbolizer *symbolizer_new_for_debug_file(const char *path);
const char *symbolizer_debug_build_id(const struct symbolizer *s);
const char *symbolizer_lookup_vaddr(struct symbolizer *s, uint64_t vaddr, uint64_t *size);
const char *symbolizer_lookup_offset(struct symbolizer *s, uint64_t off, uint64_t *size);

/* This process's vDSO as an ELF image (as far as its section headers and
 * PT_LOADs reach), or NULL. It is the kernel's, the same in every 64-bit
 * process of this kernel, so it stands in for any target's. */
const void *symbolizer_vdso_image(size_t *size);

/* Read a small /proc file (maps, stat...) into a malloc'd NUL-terminated string. */
char *symbolizer_read_proc_text(const char *path);
