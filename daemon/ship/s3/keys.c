/* dial9's object key layout, so dial9's bucket browser finds d9d's segments:
 * it locates the YYYY-MM-DD component and reads service, instance and boot id
 * at fixed positions after it, and "(epoch)-(index).bin" from the name. */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "daemon/ship/s3/s3.h"

int s3_dial9_key(char *out, size_t size, const char *prefix, int64_t start_epoch_s,
                 const char *service, const char *instance, const char *boot_id,
                 uint64_t index, const char *ext)
{
        struct tm tm;
        time_t t = (time_t)(start_epoch_s < 0 ? 0 : start_epoch_s);
        if (!service || !*service || !instance || !*instance || !boot_id || !*boot_id)
                return -EINVAL;
        gmtime_r(&t, &tm);
        int n = snprintf(out, size, "%s%s%04d-%02d-%02d/%02d%02d/%s/%s/%s/%lld-%llu%s",
                         prefix && *prefix ? prefix : "", prefix && *prefix ? "/" : "",
                         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                         service, instance, boot_id, (long long)t, (unsigned long long)index,
                         ext ? ext : "");
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : n;
}

void s3_dial9_boot_id(char out[32], uint64_t seed, int pid)
{
        char letters[5];
        for (int i = 0; i < 4; i++, seed /= 26)
                letters[i] = (char)('a' + seed % 26);
        letters[4] = 0;
        snprintf(out, 32, "%s-%d", letters, pid);
}
