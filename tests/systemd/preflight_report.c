/* preflight-report: runs d9d's start-up checks in this process and prints
 * every finding, so tests can run it under reduced capability sets. Exits 1
 * when any finding is fatal, like d9d would refuse to trace. */
#include <stdio.h>

#include "daemon/core/preflight.h"

int main(void)
{
        struct preflight_report report;

        d9d_preflight_run(&report);
        d9d_preflight_log(&report, stdout, true);
        printf("preflight: %d degraded, %d fatal\n", report.degraded, report.fatal);
        return report.fatal ? 1 : 0;
}
