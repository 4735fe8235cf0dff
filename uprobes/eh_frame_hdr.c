/* eh_frame_hdr.c: the binary search table of .eh_frame_hdr, which even
 * stripped builds keep for unwinding: every function with an FDE, by start
 * address. The planner bounds poll functions with it (func_bounds.c); the
 * daemon finds the function a stack frame lies in (daemon/record/unwind.c). */
#include <string.h>

#include "uprobes.h"

/* DW_EH_PE_datarel | DW_EH_PE_sdata4: what every linker writes for the
 * table; DW_EH_PE_udata4 for the count. Other encodings: no table. */
#define EH_TABLE_ENC 0x3b
#define EH_COUNT_ENC 0x03

bool d9_eh_table_read(const uint8_t *h, size_t len, uint64_t vaddr, struct d9_eh_table *t)
{
        /* version 1, eh_frame_ptr (4 bytes in every encoding we take), count, table */
        if (!h || len < 12 || h[0] != 1 || h[2] != EH_COUNT_ENC || h[3] != EH_TABLE_ENC || (h[1] & 0x0f) != 0x0b)
                return false;
        memcpy(&t->n, h + 8, 4);
        if ((uint64_t)t->n * 8 > len - 12)
                return false;
        t->entries = h + 12;
        t->base = vaddr;
        return true;
}

static uint64_t entry_word(const struct d9_eh_table *t, uint32_t i, unsigned word)
{
        int32_t rel;

        memcpy(&rel, t->entries + 8 * (size_t)i + 4 * word, 4);
        return t->base + (uint64_t)(int64_t)rel;
}

uint64_t d9_eh_table_start(const struct d9_eh_table *t, uint32_t i)
{
        return entry_word(t, i, 0);
}

uint64_t d9_eh_table_fde(const struct d9_eh_table *t, uint32_t i)
{
        return entry_word(t, i, 1);
}

uint32_t d9_eh_table_above(const struct d9_eh_table *t, uint64_t vaddr)
{
        uint32_t lo = 0, hi = t->n;

        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;

                if (d9_eh_table_start(t, mid) <= vaddr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}
