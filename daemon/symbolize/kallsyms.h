/* The kernel's text symbols from /proc/kallsyms, read once (off the drain
 * loop, when d9d starts) and shared by every symbolizer (sealer thread and
 * drain loop) until the loaded modules change. */
#pragma once

#include <stdint.h>

struct ksyms;

/* A reference to the current table, reading /proc/kallsyms when there is
 * none or /proc/modules changed since. NULL when it shows no addresses
 * (kptr_restrict, no CAP_SYSLOG) or cannot be read. */
struct ksyms *ksyms_get(void);
/* The table if it was read already, else NULL at once (a thread then reads
 * it): for the drain loop, which must not wait 0.1-0.3 s for the file. */
struct ksyms *ksyms_get_ready(void);
void ksyms_put(struct ksyms *k);
/* Name of the function holding addr, owned by k; NULL when below the first. */
const char *ksyms_lookup(const struct ksyms *k, uint64_t addr);
