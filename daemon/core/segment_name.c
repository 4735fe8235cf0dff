/* segment_name.c: the names of a target's trace files, trace.N.bin.active
 * while written and trace.N.bin<suffix> once sealed; the writer, the
 * sealer and the disk budget all go by them. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/segment_name.h"

int d9d_segment_index_of(const char *name)
{
        unsigned n;
        int end = 0;

        if (sscanf(name, "trace.%u.bin%n", &n, &end) != 1 || end == 0 || n > 1000000000u)
                return -1;
        return (int)n;
}

int d9d_segment_sealed_path(const char *active, const char *suffix, char *out, size_t len)
{
        size_t n = strlen(active);

        if (n < 7 || strcmp(active + n - 7, ".active"))
                return -EINVAL;
        if ((size_t)snprintf(out, len, "%.*s%s", (int)(n - 7), active, suffix) >= len)
                return -ENAMETOOLONG;
        return 0;
}
