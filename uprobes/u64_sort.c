/* u64_sort: sorted sets of addresses, as the planner keeps them. */
#include <stdlib.h>

#include "plan_int.h"

int uprobes_cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

size_t uprobes_sort_unique_u64(uint64_t *v, size_t n)
{
        size_t w = 0;

        qsort(v, n, sizeof(*v), uprobes_cmp_u64);
        for (size_t i = 0; i < n; i++)
                if (!w || v[w - 1] != v[i])
                        v[w++] = v[i];
        return w;
}
