/* plan-dump: print the probe plan for a PID or an executable (see plan_cli.c). */
#include "uprobes.h"

int main(int argc, char **argv)
{
        return probe_plan_cli(argc, argv, "plan-dump");
}
