/* symbolize: runtime address -> demangled function name for one target,
 * from a snapshot of its /proc/PID/maps (ELF .symtab/.dynsym via libelf)
 * and, for kernel addresses, /proc/kallsyms. Used by the sealer thread. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

struct symbolizer;

/* maps_text: contents of /proc/PID/maps taken while the target was alive
 * (may be NULL: only kernel addresses resolve). ELF files are opened via
 * /proc/PID/root when the process still exists, else by their plain path. */
struct symbolizer *symbolizer_new(pid_t pid, const char *maps_text);
/* The same with the target's root directory taken while it ran (root_fd,
 * not taken over; -1: plain paths, our own root): what the sealer uses,
 * since by seal time /proc/PID may belong to a new process. */
struct symbolizer *symbolizer_new_in_root(int root_fd, const char *maps_text);
/* Only the file mapped (executable) at addr; [*lo, *hi) spans its
 * executable mappings. NULL when no file is mapped there. */
struct symbolizer *symbolizer_new_for_file_at(pid_t pid, const char *maps_text, uint64_t addr,
                                              uint64_t *lo, uint64_t *hi);
void symbolizer_free(struct symbolizer *s);
/* Name for addr (owned by the symbolizer), or NULL if unknown. */
const char *symbolizer_lookup(struct symbolizer *s, uint64_t addr, uint64_t *size);

/* Read a small /proc file (maps, stat...) into a malloc'd NUL-terminated string. */
char *read_proc_text(const char *path);
