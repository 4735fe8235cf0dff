/* mapping: a file mapped into a target, from a line of its /proc/PID/maps
 * to link-time addresses: which PT_LOAD of the file a mapping shows (its
 * load bias), the placeholder name of an address no symbol names, and
 * where the executable itself is mapped (struct exe_map). Text and
 * arithmetic only, no file is opened: the symbolizer uses it with the
 * PT_LOAD headers it reads from the files, the drain loop with the probe
 * plan's (daemon/record/translate.c names boxed futures' poll fns by it). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct probe_segment;

/* An executable mapping of a file (or of [vdso]): one line of /proc/PID/maps. */
struct maps_line {
        unsigned long long start, end, offset;
        const char *path;               /* into the line, not NUL-terminated */
        size_t path_len;
};
bool maps_exec_line(const char *line, struct maps_line *m);

/* The PT_LOAD of segs[0..n) a mapping of the file's bytes [off, off + len)
 * shows: the executable one among those it overlaps, else the first it
 * overlaps (the page a mapping starts on usually also holds the tail of the
 * segment before, whose link-time delta differs: lld puts segments on their
 * own pages in memory but packs them in the file). NULL: none. */
const struct probe_segment *mapping_segment(const struct probe_segment *segs, size_t n, uint64_t off,
                                            uint64_t len);

/* The placeholder name of an address no symbol names, as frames and task
 * labels are written and resymbolize.c reads them: "[unnamed] FILE 0xVADDR"
 * with the link-time address (what addr2line -e FILE takes) when the
 * mapping's bias is known, else "[unnamed] FILE offset 0xOFF"; FILE is the
 * base name of path. */
void mapping_unnamed(char *buf, size_t n, const char *path, bool bias_known, uint64_t vaddr_or_offset);

#define EXE_MAP_RANGES 16

/* Where a target's executable is mapped: its executable mappings. */
struct exe_map {
        size_t n;                       /* 0: not known */
        struct exe_range {
                uint64_t start, end, offset;    /* runtime range and its file offset */
                bool bias_known;
                uint64_t bias;                  /* runtime - link-time address */
        } r[EXE_MAP_RANGES];
        char file[288];                 /* its base name in the map (" (deleted)" too) */
};

/* The executable mappings of the file exe names (as /proc/PID/exe reads,
 * which is how the map spells it too; the map may add " (deleted)") in
 * maps_text, placed by the executable's PT_LOAD headers segs[0..n_segs).
 * 0, or -ENOENT when the map holds none (out->n is 0 then). */
int exe_map_from_maps(const char *maps_text, const char *exe, const struct probe_segment *segs, size_t n_segs,
                      struct exe_map *out);
/* The executable's code mappings as the kernel placed them, from where its
 * code begins (mm->start_code: the lowest PF_X PT_LOAD's vaddr plus the
 * load bias) and its PT_LOAD headers; file: its path (the base name is
 * kept). 0, or -ENOENT when segs holds no code. */
int exe_map_from_code_start(uint64_t start_code, const char *file, const struct probe_segment *segs,
                            size_t n_segs, struct exe_map *out);
/* Are a and b the same map? */
bool exe_map_same(const struct exe_map *a, const struct exe_map *b);
/* The link-time address of runtime address addr: false when addr is not in
 * the executable's code or its mapping's bias is not known. */
bool exe_map_vaddr(const struct exe_map *m, uint64_t addr, uint64_t *vaddr);
/* The executable's load bias: the kernel or ld.so moves all of an ELF's
 * PT_LOADs by one, so a code mapping's also places its data (a task
 * vtable in .data.rel.ro). false when no mapping's bias is known. */
bool exe_map_bias(const struct exe_map *m, uint64_t *bias);
/* addr's placeholder name (mapping_unnamed); false when addr is not in the
 * executable's code. */
bool exe_map_unnamed(const struct exe_map *m, uint64_t addr, char *buf, size_t n);
