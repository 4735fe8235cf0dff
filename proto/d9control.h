/* d9control: the d9ctl <-> d9d control protocol.
 *
 * Newline-delimited JSON over a Unix stream socket. Every request and every
 * response is one JSON object on one line and carries "v": D9_CONTROL_VERSION.
 *
 *   request:  {"v":1,"cmd":"attach","pid":123,"duration_ms":10000,"probes":"all"}
 *   response: {"v":1,"ok":true, ...command fields...}
 *             {"v":1,"ok":false,"error":"one line saying what is wrong"}
 *
 * Commands: "ping", "list", "status" (optional "pid"), "attach" ("pid",
 * optional "duration_ms", "probes", "exe" to plan from a file before the
 * target execs it), "detach" ("pid"). A line longer than D9_CONTROL_MAX_LINE
 * is answered with an error and discarded. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The probe groups a user can choose with --probes are the BPF loader's
 * probe sets: enum d9_probe_bits, D9_PROBE_SCHED .. D9_PROBE_ALL. */
#include "bpf/d9_events.h"

#define D9_CONTROL_VERSION 1
#define D9_CONTROL_MAX_LINE (64 * 1024)

/* Build a request {"v":1,"cmd":cmd}; add fields with json_object_set_new. */
json_t *d9c_request(const char *cmd);
json_t *d9c_ok(void);
json_t *d9c_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Serialize obj as one line (compact, '\n' terminated) into a malloc'd buffer. */
char *d9c_encode_line(const json_t *obj, size_t *len);

/* Parse one request line. Returns the object (caller owns it) or NULL with
 * a one-line reason in why[]: malformed JSON, not an object, missing or
 * unsupported "v", missing "cmd". */
json_t *d9c_parse_request(const char *line, size_t len, char *why, size_t why_len);

/* "all", "default" or a comma-separated subset of
 * sched,cpu,park,poll,spawn,wake,terminate,longpoll; NULL is "default".
 * Returns a mask of enum d9_probe_bits, or -EINVAL (bad names go to *bad). */
int d9c_parse_probes(const char *list, const char **bad);
/* Render a mask back to the comma-separated form (static buffer-free: writes into buf). */
void d9c_format_probes(int mask, char *buf, size_t len);

/* "10s", "250ms", "5m", "1h", bare number = seconds. */
int d9_parse_duration_ms(const char *s, uint64_t *ms);
/* Off-CPU intervals shorter than this are counted, not recorded: "500us",
 * "1ms", "0" (record all), bare number = microseconds; at most 10 s. */
#define D9_OFFCPU_MIN_US_MAX 10000000ull
int d9_parse_offcpu_min_us(const char *s, uint64_t *us);
/* "4096", "64K", "64M", "1G" (powers of 1024). */
int d9_parse_size(const char *s, uint64_t *bytes);

/* Client side: one request, one response over a connected socket.
 * Returns the response object or NULL with errno-style *err set. */
int d9c_connect(const char *path);
json_t *d9c_call(int fd, const json_t *req, int *err);
