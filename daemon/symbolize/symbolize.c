/* symbolize.c: turn callchain addresses into names at seal time. Every
 * executable mapping of the target is mapped back to its ELF file; the
 * file offset becomes a link-time address through the PT_LOAD headers and
 * is looked up in the file's function symbols (the table and demangler the
 * probe planner uses, uprobes/elfsym). A seal knows every address before it
 * names one: its symbolizer builds no table but reads only the symbols of
 * those addresses (d9_addr_names), so naming a few hundred frames of a
 * build with 200k symbols costs kilobytes, not the table's 60 MiB. A file
 * without .symtab (stripped) takes its symbols from its separate debug
 * file, found by the same lookup
 * the probe planner uses (uprobes_debug_file_for). What stays unnamed is
 * written by file and link-time address, with each mapping's build-id and
 * load bias, so a debug file found later names it (resymbolize.c). */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdbool.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>
#include <elfutils/libdwelf.h>

#include "daemon/core/cleanup.h"
#include "proto/d9proto.h"
#include "daemon/symbolize/kallsyms.h"
#include "daemon/symbolize/mapping.h"
#include "daemon/symbolize/stack_marks.h"
#include "daemon/symbolize/symbolize.h"
#include "uprobes/elfsym/elfsym.h"
#include "uprobes/uprobes.h"

#define KERNEL_MIN 0xffff800000000000ull

struct elf_syms {
        char *path;
        char *build_id;         /* lowercase hex, NULL if none or unreadable */
        struct d9_sym_table syms;
        struct d9_addr_names *names;    /* instead of syms when only known addresses are named */
        struct probe_segment *loads;    /* its PT_LOAD headers */
        size_t n_loads;
};

struct mapping {
        uint64_t start, end, offset;
        struct elf_syms *elf;
};

struct symbolizer {
        pid_t pid;
        int root_fd;            /* >= 0: files are looked up in this root (not owned) */
        struct mapping *maps;
        size_t n_maps;
        struct anon_code { uint64_t start, end; } *anon;  /* executable, no file: JIT code */
        size_t n_anon;
        /* The kernel's "[uprobes]" page, where a uprobe steps the probed
         * instruction out of line: d9d's probe, not the target's code. */
        uint64_t xol_start, xol_end;
        struct elf_syms **elfs;
        size_t n_elfs;
        struct ksyms *ksyms;    /* shared table, taken on the first kernel address */
        bool ksyms_tried;
        bool known_addrs;       /* files get names, not tables (symbolizer_new_for_addrs) */
};

/* Far above the maps of a JVM or V8 with 100k mappings; the bound is for
 * a /proc file that keeps growing while it is read. */
#define PROC_TEXT_MAX (64u << 20)

char *symbolizer_read_proc_text(const char *path)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct d9_buf text = { 0 };

        if (fd < 0)
                return NULL;
        if (d9_read_all(fd, &text, PROC_TEXT_MAX) < 0) {
                d9_buf_free(&text);
                return NULL;
        }
        return (char *)text.data;
}

/* Appends the function symbols of elf (opened from fd) to es's table or
 * names; true if it has a .symtab. Past the table's bounds (a hostile
 * file) what was read stays. */
static bool elf_collect_syms(Elf *elf, int fd, struct elf_syms *es)
{
        bool has_symtab = false;

        if (es->names)
                (void)d9_addr_names_add_elf(es->names, elf, fd, &has_symtab);
        else
                (void)d9_sym_table_add_elf(&es->syms, elf, &has_symtab);
        return has_symtab;
}

/* Stripped file: .dynsym names little of a Rust binary, so read the .symtab
 * of its debug file. Its symbol values are the same link-time addresses,
 * and the PT_LOAD headers of the file itself keep mapping offsets to them. */
static void debug_file_syms(const char *opened, const char *root, struct elf_syms *es)
{
        char *dbg = uprobes_debug_file_for(opened, root);
        int fd = dbg ? d9_target_file_open(dbg) : -1;
        Elf *elf;

        free(dbg);
        if (fd < 0)
                return;
        elf = elf_begin(fd, ELF_C_READ, NULL);
        if (elf) {
                elf_collect_syms(elf, fd, es);
                elf_end(elf);
        }
        close(fd);
}

static char *elf_build_id_hex(Elf *elf)
{
        const void *id = NULL;
        ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
        char *hex;

        if (n <= 0 || n > 64 || !(hex = malloc(2 * (size_t)n + 1)))
                return NULL;
        for (ssize_t i = 0; i < n; i++)
                snprintf(hex + 2 * i, 3, "%02x", ((const uint8_t *)id)[i]);
        return hex;
}

static void elf_read_loads(Elf *elf, struct elf_syms *es)
{
        size_t nph = 0;

        if (elf_getphdrnum(elf, &nph) != 0)
                return;
        es->loads = calloc(nph ? nph : 1, sizeof(*es->loads));
        for (size_t i = 0; es->loads && i < nph; i++) {
                GElf_Phdr ph;
                if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD)
                        es->loads[es->n_loads++] = (struct probe_segment){ ph.p_vaddr, ph.p_offset, ph.p_filesz,
                                                                          (ph.p_flags & PF_X) != 0 };
        }
}

/* path of the target, opened in its root: an fd or a negative errno. from
 * (PATH_MAX + 64 bytes) becomes the path it was opened by and root (64
 * bytes) its root ("" for ours), which its debug file is looked up by. */
static int elf_open(const struct symbolizer *s, const char *path, char *from, char *root)
{
        int fd;

        /* A root taken while the target lived stays right after it exited;
         * /proc/PID/root is only asked while it runs (a recycled PID's root
         * is another process's). */
        if (s->root_fd >= 0)
                snprintf(root, 64, "/proc/self/fd/%d", s->root_fd);
        else
                snprintf(root, 64, "/proc/%d/root", s->pid);
        snprintf(from, PATH_MAX + 64, "%s%s", root, path);
        /* A target's files: no FIFO, device, symlink or oversized file (see
         * d9_target_file_open), and read with pread (ELF_C_READ), not mapped,
         * so a file truncated under us is a read error, not SIGBUS. */
        fd = s->root_fd >= 0 ? d9_target_file_openat(s->root_fd, path, true) :
             s->pid > 0 ? d9_target_file_open(from) : -ENOENT;
        if (fd < 0 && fd != -EBADFD && s->root_fd < 0) {
                /* The target is gone: its files are looked up in our namespace. */
                root[0] = 0;
                snprintf(from, PATH_MAX + 64, "%s", path);
                fd = d9_target_file_open(path);
        }
        return fd;
}

/* A file's PT_LOADs and build-id, and its symbol table unless only known
 * addresses are named (elf_name_addrs). */
static struct elf_syms *elf_load(const struct symbolizer *s, const char *path)
{
        char from[PATH_MAX + 64], root[64];
        struct elf_syms *es = calloc(1, sizeof(*es));
        Elf *elf;
        size_t nph = 0;
        int fd;

        if (!es)
                return NULL;
        es->path = strdup(path);
        fd = elf_open(s, path, from, root);
        if (fd < 0)
                return es; /* no symbols: addresses stay hex */
        elf_version(EV_CURRENT);
        elf = elf_begin(fd, ELF_C_READ, NULL);
        if (elf && elf_getphdrnum(elf, &nph) == 0) {
                elf_read_loads(elf, es);
                es->build_id = elf_build_id_hex(elf);
                if (!s->known_addrs) {
                        if (!elf_collect_syms(elf, fd, es))
                                debug_file_syms(from, root, es);
                        d9_sym_table_sort(&es->syms);
                }
        }
        if (elf)
                elf_end(elf);
        close(fd);
        return es;
}

/* Names for the link-time addresses vaddrs of es's file: the symbols a
 * table of it (and of its debug file) would give them, read without one. */
static void elf_name_addrs(const struct symbolizer *s, struct elf_syms *es, const uint64_t *vaddrs, size_t n)
{
        char from[PATH_MAX + 64], root[64];
        Elf *elf;
        int fd;

        if (d9_addr_names_new(vaddrs, n, &es->names) < 0 || (fd = elf_open(s, es->path, from, root)) < 0)
                return;
        elf = elf_begin(fd, ELF_C_READ, NULL);
        if (elf && !elf_collect_syms(elf, fd, es))
                debug_file_syms(from, root, es);
        if (elf)
                elf_end(elf);
        close(fd);
}

const void *symbolizer_vdso_image(size_t *size)
{
        const Elf64_Ehdr *eh = (const Elf64_Ehdr *)getauxval(AT_SYSINFO_EHDR);
        size_t n;

        if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
            eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum > 64)
                return NULL;
        n = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
        for (unsigned i = 0; i < eh->e_phnum; i++) {
                const Elf64_Phdr *ph = (const Elf64_Phdr *)((const char *)eh + eh->e_phoff) + i;
                if (ph->p_type == PT_LOAD && ph->p_offset + ph->p_filesz > n)
                        n = ph->p_offset + ph->p_filesz;
        }
        if (n > (1u << 20))
                return NULL;
        *size = n;
        return eh;
}

/* d9d's own vDSO names the target's [vdso] frames, also after the target
 * exited. Copied out of our mapping: libelf gets memory it may own. */
static void vdso_load(struct elf_syms *es)
{
        const void *image;
        size_t size, nph = 0;
        char *copy;
        Elf *elf;

        if (!(image = symbolizer_vdso_image(&size)) || !(copy = malloc(size)))
                return;
        memcpy(copy, image, size);
        elf_version(EV_CURRENT);
        elf = elf_memory(copy, size);
        if (elf && elf_getphdrnum(elf, &nph) == 0) {
                elf_read_loads(elf, es);
                elf_collect_syms(elf, -1, es);
                d9_sym_table_sort(&es->syms);
        }
        elf_end(elf);
        free(copy);
}

static struct elf_syms *elf_get(struct symbolizer *s, const char *path)
{
        for (size_t i = 0; i < s->n_elfs; i++)
                if (!strcmp(s->elfs[i]->path, path))
                        return s->elfs[i];
        struct elf_syms **more = realloc(s->elfs, (s->n_elfs + 1) * sizeof(*more));
        if (!more)
                return NULL;
        s->elfs = more;
        struct elf_syms *es = strcmp(path, "[vdso]") ? elf_load(s, path) : calloc(1, sizeof(*es));
        if (es && !es->path && (es->path = strdup(path)))
                vdso_load(es);
        if (es)
                s->elfs[s->n_elfs++] = es;
        return es;
}

/* An executable mapping no file lies behind: its range, and what the
 * path column holds (an empty string for anonymous memory, a JIT's code
 * cache, as in V8 or the JVM; "[uprobes]" for the kernel's out-of-line
 * page; "[vdso]" and the like). False for any other line. */
static bool maps_no_file_exec_line(const char *line, uint64_t *start, uint64_t *end, char *name, size_t size)
{
        unsigned long long a, b;
        char perms[8];
        size_t len;
        int at = 0;

        if (sscanf(line, "%llx-%llx %7s %*x %*s %*u%n", &a, &b, perms, &at) != 3 || perms[2] != 'x')
                return false;
        line += at;
        line += strspn(line, " \t");
        len = strcspn(line, "\n");
        while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
                len--;
        if (line[0] == '/' || len >= size)
                return false;
        memcpy(name, line, len);
        name[len] = 0;
        *start = a;
        *end = b;
        return true;
}

static void add_anon_code(struct symbolizer *s, uint64_t start, uint64_t end)
{
        struct anon_code *more = realloc(s->anon, (s->n_anon + 1) * sizeof(*more));

        if (more) {
                s->anon = more;
                s->anon[s->n_anon++] = (struct anon_code){ start, end };
        }
}

/* Every executable mapping: of a file, of [vdso], anonymous (JIT code), or
 * the uprobes' out-of-line page. */
static void parse_maps(struct symbolizer *s, const char *text)
{
        for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
                struct maps_line m;
                char path[PATH_MAX];
                uint64_t a, b;
                char name[16];

                if (maps_no_file_exec_line(line, &a, &b, name, sizeof(name))) {
                        if (!name[0]) {
                                add_anon_code(s, a, b);
                                continue;
                        }
                        if (!strcmp(name, "[uprobes]")) {
                                s->xol_start = a;
                                s->xol_end = b;
                                continue;
                        }
                }
                if (!maps_exec_line(line, &m) || m.path_len >= sizeof(path))
                        continue;
                struct mapping *more = realloc(s->maps, (s->n_maps + 1) * sizeof(*more));
                if (!more)
                        continue;
                memcpy(path, m.path, m.path_len);
                path[m.path_len] = 0;
                s->maps = more;
                s->maps[s->n_maps++] = (struct mapping){ m.start, m.end, m.offset, elf_get(s, path) };
        }
}

static struct symbolizer *symbolizer_alloc(pid_t pid, int root_fd)
{
        struct symbolizer *s = calloc(1, sizeof(*s));

        if (s) {
                s->pid = pid;
                s->root_fd = root_fd;
        }
        return s;
}

struct symbolizer *symbolizer_new(pid_t pid, const char *maps_text)
{
        struct symbolizer *s = symbolizer_alloc(pid, -1);

        if (s && maps_text)
                parse_maps(s, maps_text);
        return s;
}

/* The PT_LOAD of es holding file offset off, or NULL. */
static const struct probe_segment *load_at(const struct elf_syms *es, uint64_t off)
{
        for (size_t j = 0; es && j < es->n_loads; j++)
                if (off >= es->loads[j].offset && off < es->loads[j].offset + es->loads[j].filesz)
                        return &es->loads[j];
        return NULL;
}

static const char *lookup_vaddr(struct elf_syms *es, uint64_t vaddr, uint64_t *size)
{
        /* A size-0 symbol still names the code up to the next one. */
        struct d9_sym *sym;

        if (es->names)
                return d9_addr_names_find_nearest(es->names, vaddr, size);
        if (!(sym = d9_sym_table_find_nearest(&es->syms, vaddr)))
                return NULL;
        *size = sym->size;
        return d9_sym_name(sym);
}

/* The file of a user address and its link-time address there. */
static bool link_vaddr(const struct symbolizer *s, uint64_t addr, struct elf_syms **es, uint64_t *vaddr)
{
        for (size_t i = 0; i < s->n_maps; i++) {
                const struct mapping *m = &s->maps[i];
                if (addr < m->start || addr >= m->end || !m->elf)
                        continue;
                uint64_t off = addr - m->start + m->offset;
                const struct probe_segment *ph = load_at(m->elf, off);
                *es = m->elf;
                *vaddr = ph ? off - ph->offset + ph->vaddr : 0;
                return ph != NULL;
        }
        return false;
}

struct file_vaddr {
        struct elf_syms *es;
        uint64_t vaddr;
};

static int by_file(const void *a, const void *b)
{
        uintptr_t x = (uintptr_t)((const struct file_vaddr *)a)->es, y = (uintptr_t)((const struct file_vaddr *)b)->es;

        return x < y ? -1 : x > y;
}

/* Each file's share of addrs, named in one pass over its symbols. The
 * vDSO's few symbols are a table already (vdso_load). */
static void name_addrs(struct symbolizer *s, const uint64_t *addrs, size_t n)
{
        _cleanup_free_ struct file_vaddr *fv = malloc((n ? n : 1) * sizeof(*fv));
        _cleanup_free_ uint64_t *vaddrs = malloc((n ? n : 1) * sizeof(*vaddrs));
        size_t k = 0;

        if (!fv || !vaddrs)
                return;
        for (size_t i = 0; i < n; i++)
                if (!stack_mark_name(addrs[i]) && addrs[i] < KERNEL_MIN &&
                    link_vaddr(s, addrs[i], &fv[k].es, &fv[k].vaddr) && strcmp(fv[k].es->path, "[vdso]"))
                        k++;
        qsort(fv, k, sizeof(*fv), by_file);
        for (size_t i = 0, j; i < k; i = j) {
                for (j = i; j < k && fv[j].es == fv[i].es; j++)
                        vaddrs[j - i] = fv[j].vaddr;
                elf_name_addrs(s, fv[i].es, vaddrs, j - i);
        }
}

struct symbolizer *symbolizer_new_for_addrs(int root_fd, const char *maps_text, const uint64_t *addrs, size_t n)
{
        struct symbolizer *s = symbolizer_alloc(0, root_fd);

        if (s && maps_text) {
                s->known_addrs = true;
                parse_maps(s, maps_text);
                name_addrs(s, addrs, n);
        }
        return s;
}

static const struct mapping *mapping_at(const struct symbolizer *s, uint64_t addr)
{
        for (size_t i = 0; i < s->n_maps; i++)
                if (addr >= s->maps[i].start && addr < s->maps[i].end)
                        return &s->maps[i];
        return NULL;
}

bool symbolizer_mapping(const struct symbolizer *s, size_t i, struct sym_mapping *out)
{
        const struct mapping *m;
        const struct probe_segment *ph;

        if (i >= s->n_maps)
                return false;
        m = &s->maps[i];
        ph = m->elf ? mapping_segment(m->elf->loads, m->elf->n_loads, m->offset, m->end - m->start) : NULL;
        *out = (struct sym_mapping){
                .start = m->start, .end = m->end, .offset = m->offset,
                .bias_known = ph != NULL,
                .bias = ph ? m->start - m->offset + ph->offset - ph->vaddr : 0,
                .path = m->elf ? m->elf->path : "",
                .build_id = m->elf && m->elf->build_id ? m->elf->build_id : "",
        };
        return true;
}

bool symbolizer_unnamed(const struct symbolizer *s, uint64_t addr, char *buf, size_t n)
{
        const struct mapping *m = mapping_at(s, addr);
        struct sym_mapping sm;

        if (!m || !symbolizer_mapping(s, (size_t)(m - s->maps), &sm))
                return false;
        mapping_unnamed(buf, n, sm.path, sm.bias_known, sm.bias_known ? addr - sm.bias : addr - m->start + m->offset);
        return true;
}

bool symbolizer_in_anonymous_code(const struct symbolizer *s, uint64_t addr)
{
        for (size_t i = 0; i < s->n_anon; i++)
                if (addr >= s->anon[i].start && addr < s->anon[i].end)
                        return true;
        return false;
}

struct symbolizer *symbolizer_new_for_debug_file(const char *path)
{
        struct symbolizer *s = calloc(1, sizeof(*s));
        struct elf_syms *es = calloc(1, sizeof(*es));
        int fd = d9_target_file_open(path);
        Elf *elf;

        if (!s || !es || fd < 0 || !(s->elfs = calloc(1, sizeof(*s->elfs)))) {
                if (fd >= 0)
                        close(fd);
                free(es);
                symbolizer_free(s);
                return NULL;
        }
        s->elfs[s->n_elfs++] = es;
        es->path = strdup(path);
        elf_version(EV_CURRENT);
        elf = elf_begin(fd, ELF_C_READ, NULL);
        if (elf) {
                elf_read_loads(elf, es);
                es->build_id = elf_build_id_hex(elf);
                elf_collect_syms(elf, fd, es);
                d9_sym_table_sort(&es->syms);
                elf_end(elf);
        }
        close(fd);
        return s;
}

const char *symbolizer_debug_build_id(const struct symbolizer *s)
{
        return s->n_elfs && s->elfs[0]->build_id ? s->elfs[0]->build_id : NULL;
}

const char *symbolizer_lookup_vaddr(struct symbolizer *s, uint64_t vaddr, uint64_t *size)
{
        return s->n_elfs ? lookup_vaddr(s->elfs[0], vaddr, size) : NULL;
}

const char *symbolizer_lookup_offset(struct symbolizer *s, uint64_t off, uint64_t *size)
{
        const struct probe_segment *ph = s->n_elfs ? load_at(s->elfs[0], off) : NULL;

        return ph ? lookup_vaddr(s->elfs[0], off - ph->offset + ph->vaddr, size) : NULL;
}

const char *symbolizer_lookup(struct symbolizer *s, uint64_t addr, uint64_t *size)
{
        const char *mark = stack_mark_name(addr);

        if (mark) {
                *size = 1;
                return mark;
        }
        /* A sample while a uprobe stepped the probed instruction there
         * (npm nulljs, the full set: 42 stacks under CPU hogs, named
         * "[symbolize-failed]"): d9d's cost, named as its trap is. */
        if (addr >= s->xol_start && addr < s->xol_end) {
                *size = 1;
                return stack_mark_name(stack_mark_addr(STACK_MARK_D9_UPROBE));
        }
        if (addr >= KERNEL_MIN) {
                if (!s->ksyms_tried) {
                        s->ksyms = ksyms_get();
                        s->ksyms_tried = true;
                }
                *size = 0;
                return ksyms_lookup(s->ksyms, addr);
        }
        struct elf_syms *es;
        uint64_t vaddr;

        return link_vaddr(s, addr, &es, &vaddr) ? lookup_vaddr(es, vaddr, size) : NULL;
}

void symbolizer_free(struct symbolizer *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n_elfs; i++) {
                d9_sym_table_free(&s->elfs[i]->syms);
                d9_addr_names_free(s->elfs[i]->names);
                free(s->elfs[i]->loads);
                free(s->elfs[i]->path);
                free(s->elfs[i]->build_id);
                free(s->elfs[i]);
        }
        if (s->ksyms)
                ksyms_put(s->ksyms);
        free(s->elfs);
        free(s->maps);
        free(s->anon);
        free(s);
}
