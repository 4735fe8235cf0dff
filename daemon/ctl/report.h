/* d9ctl report: names the culprits in a recording. One pass over the
 * segments collects polls, parks, wakes, samples and symbols; the analysis
 * is a JSON document (--json prints it), and the text screen is rendered
 * from that same document, so the two never disagree. */
#pragma once

#include <jansson.h>
#include <stddef.h>

struct report;

/* top: how many rows each "longest" list keeps. NULL on ENOMEM. */
struct report *d9ctl_report_new(unsigned top);
void d9ctl_report_free(struct report *r);
/* Adds one segment (raw, .gz or .zst); segments of one target in time
 * order. Returns 0, or a negative errno with a one-line reason in why. */
int d9ctl_report_add_file(struct report *r, const char *path, char *why, size_t why_len);
/* The findings; the caller owns the reference. */
json_t *d9ctl_report_result(struct report *r);
/* The text screen of d9ctl_report_result()'s document. */
void d9ctl_report_print_text(FILE *out, const json_t *doc);
