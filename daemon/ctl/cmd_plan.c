/* d9ctl plan: show the probe plan d9d would use for a process or an
 * executable, computed locally (no daemon needed; reading another user's
 * /proc/PID/exe needs root or CAP_SYS_PTRACE). */
#include "d9ctl.h"
#include "uprobes/uprobes.h"

int d9ctl_cmd_plan(int argc, char **argv)
{
        return probe_plan_cli(argc, argv, "d9ctl plan");
}
