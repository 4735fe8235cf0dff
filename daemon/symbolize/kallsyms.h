/* The kernel's text symbols from /proc/kallsyms, read once and shared by
 * every symbolizer (sealer thread and drain loop) until the loaded modules
 * change or nothing has used them for a while. */
#pragma once

#include <stdint.h>

struct ksyms;

/* A reference to the current table, reading /proc/kallsyms when there is
 * none or /proc/modules changed since. NULL when it shows no addresses
 * (kptr_restrict, no CAP_SYSLOG) or cannot be read. */
struct ksyms *ksyms_get(void);
void ksyms_put(struct ksyms *k);
/* Name of the function holding addr, owned by k; NULL when below the first. */
const char *ksyms_lookup(const struct ksyms *k, uint64_t addr);
/* Frees the table when unused for idle_s seconds (memory back between seals). */
void ksyms_drop_idle(unsigned idle_s);
