/* log.c: the daemon's single log sink. One line per call, prefixed so a
 * grep over the journal finds d9d's messages by severity. */
#include <stdio.h>

#include "daemon/core/log.h"

void d9_log(const char *level, const char *fmt, ...)
{
        char line[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        /* One fprintf so concurrent threads (sealer, drain) never interleave. */
        fprintf(stderr, "d9d: %s: %s\n", level, line);
}
