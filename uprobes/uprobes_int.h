/* Internal interfaces between the files of uprobes/. Nothing here is part of
 * the contract with the BPF loader; that is uprobes.h. */
#pragma once

#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "daemon/core/cleanup.h"
#include "uprobes/elfsym/elfsym.h"
#include "uprobes.h"

/* ---- elf_image.c: one opened ELF file, read-only ------------------------ */

struct elf_segment {
        uint64_t vaddr, memsz, offset, filesz;
        uint32_t flags; /* PF_X | PF_W | PF_R */
};

struct elf_image {
        char *path;
        int fd;
        Elf *elf;
        uint16_t e_type;        /* ET_EXEC or ET_DYN */
        uint16_t e_machine;
        struct elf_segment *segs; /* PT_LOAD only */
        size_t n_segs;
        uint64_t tls_size;      /* PT_TLS memsz rounded up to its alignment */
        size_t shstrndx;
        bool has_sections;
};

/* Opens path with d9_target_file_open (no symlink, regular, size-capped). */
int d9_elf_image_open(const char *path, struct elf_image **out, char **err_msg);
/* Same from an open file, which it takes over (closed in all cases). */
int d9_elf_image_open_fd(int fd, const char *path, struct elf_image **out, char **err_msg);
void d9_elf_image_free(struct elf_image *img);
/* File offset of a link-time address inside a PT_LOAD segment; -ERANGE if none. */
int d9_elf_vaddr_to_offset(const struct elf_image *img, uint64_t vaddr, uint64_t *offset);
/* True if vaddr lies in an executable PT_LOAD segment. */
bool d9_elf_vaddr_is_exec(const struct elf_image *img, uint64_t vaddr);
/* Pointer to n bytes of file content at vaddr, or NULL (bss, out of range). */
const uint8_t *d9_elf_vaddr_bytes(const struct elf_image *img, uint64_t vaddr, size_t n);
/* Section by name (first match); returns the Elf_Scn or NULL. */
Elf_Scn *d9_elf_section_by_name(const struct elf_image *img, const char *name, GElf_Shdr *shdr);
/* Whole section contents (NULL for SHT_NOBITS or when absent). */
const uint8_t *d9_elf_section_data(const struct elf_image *img, const char *name,
                                size_t *size, uint64_t *addr);
/* Build-id as lowercase hex (malloc'd) or NULL. */
char *d9_elf_build_id(const struct elf_image *img);
/* .gnu_debuglink file name (malloc'd) or NULL. */
char *d9_elf_debuglink(const struct elf_image *img);

/* ---- target_open.c: from a PID to a readable executable path ------------ */

/* Opens the executable of the process behind pidfd (PID pid in our
 * namespace) through /proc/PID/exe, checks the pidfd still names a live
 * process afterwards, and names it (*display: /proc/PID/root/<exe> when that
 * is the same inode, for debug-file lookups, else /proc/PID/exe). pidfd < 0:
 * one is taken here first. Returns the fd or a negative errno. */
int uprobes_target_exe_open(int pidfd, pid_t pid, char **display, char **err_msg);


/* ---- debug_file.c: separate debug info ---------------------------------- */

/* Path of a separate debug file for img (build-id, then .gnu_debuglink), or NULL.
 * root is a path prefix for the target's mount namespace ("" for ours). */
char *uprobes_debug_file_find(const struct elf_image *img, const char *root);

/* ---- symbols.c: function symbols of an image plus its debug file -------- */

struct symtab {
        struct d9_sym_table table;      /* tokio names demangled already */
        bool from_symtab;       /* .symtab found (not only .dynsym) */
        bool any_v0;            /* some tokio symbol uses v0 mangling */
        char *debug_path;       /* separate debug file used, or NULL */
};

int uprobes_symtab_load(const struct elf_image *img, const char *root, struct symtab *st);
void uprobes_symtab_free(struct symtab *st);

/* ---- relocs.c: where a PIE's pointers to itself are ---------------------- */

struct reloc {
        uint64_t where, value;  /* link-time address of the pointer, and its target */
};

struct reloc_list {
        struct reloc *r;        /* sorted by where */
        size_t n, cap;
        const char *method;     /* "rela.dyn", "relr.dyn", the section read
                                 * word by word, NULL when there are none */
};

/* The relative relocations of img (none for a non-PIE binary). */
int uprobes_relocs_collect(const struct elf_image *img, struct reloc_list *l);
/* A non-PIE binary's pointers are plain words: those of section that
 * point into executable code, as the relocations a PIE would have there
 * (method = section). */
int uprobes_relocs_from_words(const struct elf_image *img, const char *section, struct reloc_list *l);
/* The relocation of the pointer at where, or NULL (not relocated). */
const struct reloc *uprobes_reloc_at(const struct reloc_list *l, uint64_t where);
void uprobes_relocs_free(struct reloc_list *l);

/* ---- vtable_scan.c: task vtables by shape ------------------------------- */

struct task_vtable {
        uint64_t vaddr;         /* address of the vtable */
        uint64_t fn[7];         /* relocated function slots; fn[0] = raw::poll */
        uint64_t off[3];        /* the three unrelocated offsets, in slot order */
};

struct vtable_scan {
        struct task_vtable *v;
        size_t n;
        int id_slot;            /* index (in u64 words) of id_offset, or -1 */
        int scheduler_slot, trailer_slot;
        const char *method;     /* "rela.dyn", "relr.dyn", "data.rel.ro" */
        /* Tokio's task RawWakerVTable (clone, wake, wake_by_ref, drop), or 0
         * (PIE only: found through the relocations, see find_task_waker). */
        uint64_t waker_vtable;
        uint64_t waker_fn[4];
        struct reloc_list relocs;       /* what the scan read (relocs.c) */
};

int uprobes_vtable_scan_run(const struct elf_image *img, struct vtable_scan *vs);
void uprobes_vtable_scan_free(struct vtable_scan *vs);

/* ---- x86_insn.c: just enough x86-64 decoding ----------------------------- */

struct x86_insn {
        int len;                /* bytes, or 0 if not decodable */
        bool is_ret;
        bool is_jmp_rel;        /* jmp rel8/rel32 */
        bool is_call_rel;       /* call rel32 */
        bool is_jcc;            /* conditional jump rel8/rel32 (rel set too) */
        bool is_stop;           /* control never falls through: int3, ud2, hlt, jmp *mem */
        bool is_jmp_reg;        /* jmp *%reg: a jump table (LLVM's switch lowering) */
        int64_t rel;            /* branch displacement for jmp/call rel */
        enum probe_insn_class cls;
        char what[24];          /* short mnemonic class, e.g. "push %rbp" */
};

/* Decode one instruction at p (at most n bytes available). */
void uprobes_x86_decode(const uint8_t *p, size_t n, struct x86_insn *out);

/* ---- tokio_version.c ----------------------------------------------------- */

char *uprobes_tokio_version_detect(const struct elf_image *img);
/* The same over size bytes at d (the most referenced `tokio-V/src`). */
char *uprobes_tokio_version_in(const uint8_t *d, size_t size);
