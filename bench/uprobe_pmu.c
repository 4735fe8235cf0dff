/* uprobe_pmu.c: see uprobe_pmu.h. */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uprobe_pmu.h"

int uprobe_pmu_type(void)
{
        FILE *f = fopen("/sys/bus/event_source/devices/uprobe/type", "re");
        int type = -1;

        if (f) {
                if (fscanf(f, "%d", &type) != 1)
                        type = -1;
                fclose(f);
        }
        return type;
}

int uprobe_pmu_open(const char *path, uint64_t offset, bool disabled)
{
        int type = uprobe_pmu_type();
        struct perf_event_attr attr = {
                .size = sizeof(attr),
                .type = (uint32_t)type,
                .config1 = (uint64_t)(uintptr_t)path,   /* uprobe_path */
                .config2 = offset,                      /* probe_offset */
                .disabled = disabled,
        };

        if (type < 0) {
                errno = ENODEV;
                return -1;
        }
        return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}
