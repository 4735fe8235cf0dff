/* d9ctl detach: stop tracing a process; its last segment gets sealed. */
#include <getopt.h>
#include <stdio.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"

int d9ctl_cmd_detach(int argc, char **argv)
{
        static const struct option opts[] = {
                { "pid", required_argument, NULL, 'p' },
                {},
        };
        json_t *req, *resp;
        int opt, pid = 0;

        while ((opt = getopt_long(argc, argv, "p:", opts, NULL)) != -1) {
                if (opt != 'p' || (pid = d9ctl_parse_pid("detach", optarg)) < 0)
                        return 2;
        }
        if (!pid) {
                fprintf(stderr, "d9ctl detach: --pid is required\n");
                return 2;
        }
        req = d9c_request("detach");
        json_object_set_new(req, "pid", json_integer(pid));
        resp = d9ctl_call(req);
        if (!resp)
                return 1;
        printf("detached from pid %d; segments in %s\n", pid,
               json_string_value(json_object_get(json_object_get(resp, "target"), "dir")));
        json_decref(resp);
        return 0;
}
