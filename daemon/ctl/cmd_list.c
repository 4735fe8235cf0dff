/* d9ctl list: the targets d9d traces (and recently finished ones). */
#include <stdio.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"

int cmd_list(int argc, char **argv)
{
        json_t *resp, *t;
        size_t i;

        if (argc > 1) {
                fprintf(stderr, "d9ctl list: takes no arguments\n");
                return 2;
        }
        resp = d9ctl_call(d9c_request("list"));
        if (!resp)
                return 1;
        printf("%-8s %-10s %s\n", "PID", "STATE", "SERVICE");
        json_array_foreach(json_object_get(resp, "targets"), i, t)
                printf("%-8lld %-10s %s\n", (long long)json_integer_value(json_object_get(t, "pid")),
                       json_string_value(json_object_get(t, "state")), json_string_value(json_object_get(t, "service")));
        json_decref(resp);
        return 0;
}
