/* client: d9ctl's side of the control protocol (shared by the subcommands
 * that talk to d9d). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Send req (consumed) to d9d and return its successful response. On any
 * failure prints one line to stderr and returns NULL. */
json_t *d9ctl_call(json_t *req);
/* Same without printing: on failure *why gets the malloc'd line. */
json_t *d9ctl_call_quiet(json_t *req, char **why);
/* Human-readable probe plan: what attached, what is missing and why. */
void d9ctl_print_plan(FILE *out, const json_t *plan);
/* Parse "--pid N" style values; prints a one-line error and returns -1 on junk. */
int d9ctl_parse_pid(const char *cmd, const char *arg);
/* --offcpu-min for `cmd`: microseconds, or -1 after a one-line error. */
int64_t d9ctl_parse_offcpu_min(const char *cmd, const char *arg);
/* "4.2s", "3m07s", "2h05m". */
const char *d9ctl_format_duration(uint64_t ms, char *buf, size_t n);
/* Local "YYYY-MM-DD HH:MM:SS", or "-" when unknown. */
const char *d9ctl_format_wall(int64_t unix_ms, char *buf, size_t n);
/* A list/status target that is still recording or sealing. */
bool d9ctl_target_live(const json_t *t);
/* JSON, indented, on stdout. */
void d9ctl_print_json(const json_t *j);

/* --accept-queues ('A') and --resources-interval ('R') of attach and
 * record, into the attach request. Returns 0, or -1 after saying why. */
#define D9CTL_SAMPLE_OPTIONS { "accept-queues", no_argument, NULL, 'A' }, \
                             { "resources-interval", required_argument, NULL, 'R' }, \
                             { "full-on-stall", required_argument, NULL, 'F' }
int d9ctl_set_sample_option(const char *cmd, json_t *req, int opt, const char *arg);
