/* report_of_trace.h: d9ctl report over a trace held in memory, for the
 * report tests that write their traces themselves. */
#pragma once

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/ctl/report.h"

/* The report's JSON document of trace (n bytes), and its text into text
 * (text_len bytes, when text is not NULL); NULL if the report failed. */
static inline json_t *report_of_trace(const uint8_t *trace, size_t n, char *text, size_t text_len)
{
        char path[] = "/tmp/d9-report-test-XXXXXX", why[256];
        int fd = mkstemp(path);
        struct report *rep = d9ctl_report_new(10);
        json_t *doc = NULL;
        FILE *out;

        if (fd < 0 || !rep || write(fd, trace, n) != (ssize_t)n) {
                printf("# cannot write the trace to %s\n", path);
        } else if (d9ctl_report_add_file(rep, path, why, sizeof(why)) < 0) {
                printf("# report: %s\n", why);
        } else {
                doc = d9ctl_report_result(rep);
                out = text ? fmemopen(text, text_len, "w") : NULL;
                if (out) {
                        d9ctl_report_print_text(out, doc);
                        fclose(out);
                }
        }
        if (fd >= 0) {
                close(fd);
                unlink(path);
        }
        d9ctl_report_free(rep);
        return doc;
}
