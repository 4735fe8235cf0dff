/* What the d9ctl commands that read recordings (dump, report, export) share:
 * loading one segment with a one-line reason on failure, the segments a
 * directory stands for, a field of a decoded event by name, and the
 * address -> name table of a segment's SymbolTableEntry records. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "d9proto.h"

/* Reads and decompresses path (raw, .gz, .zst; bounded like dump). 0, or a
 * negative errno with "PATH: reason" in why. kind may be NULL. */
int d9ctl_trace_load(const char *path, uint8_t **buf, size_t *len, enum d9_compress *kind, char *why,
               size_t why_len);

/* d9_decode with "PATH: corrupt trace at offset N: reason" (or the errno's
 * text) in why on failure. res may be NULL. */
int d9ctl_trace_decode(const char *path, const uint8_t *buf, size_t len, const struct d9_dec_opts *opts,
                 struct d9_dec_result *res, char *why, size_t why_len);

/* The trace files an argument stands for: a directory gives the *.bin,
 * *.bin.gz, *.bin.zst directly in it in version order (trace.2 before
 * trace.10); one with none there, those of the one recording below it
 * (SERVICE/INSTANCE, as `record --out` writes; more than one is an
 * error naming them); anything else is itself. Appends strdup'ed paths to
 * *paths. 0, or a negative errno with "ARG: reason" in why. */
int d9ctl_trace_paths_add(const char *arg, char ***paths, size_t *n, char *why, size_t why_len);
/* Puts the paths in version order: a session's segments in the order they
 * were written, however they were given (a shell's trace.*.bin.zst puts
 * trace.10 before trace.2, and a report read them out of order: 12.5 s
 * parked in an 8 s recording). */
void d9ctl_trace_paths_sort(char **paths, size_t n);
void d9ctl_trace_paths_free(char **paths, size_t n);

/* The named field of ev, or NULL when the schema has none or an optional
 * field is absent. */
const struct d9_value *d9ctl_trace_field(const struct d9_dec_event *ev, const char *name);
/* Its unsigned value, 0 when missing. */
uint64_t d9ctl_trace_field_u(const struct d9_dec_event *ev, const char *name);

/* The value of key in a SegmentMetadataEvent's entries: 1 and *value set,
 * or 0 (not metadata, or no such key). */
int d9ctl_trace_metadata_value(const struct d9_dec_event *ev, const char *key, struct d9_value *value);

/* The segments of one recording (SegmentMetadataEvent "recording")
 * continue each other: a poll or park open at one's end goes on in the
 * next. A reader calls _file before each file and _event with each event. */
struct trace_recording {
        char *key;      /* the current recording's; NULL: none */
        bool file_begun;
};
enum trace_recording_step {
        TRACE_RECORDING_INSIDE,    /* not a file's first event */
        TRACE_RECORDING_GOES_ON,   /* a file's first event: same recording */
        TRACE_RECORDING_NEW,       /* a file's first event: another begins */
};
void d9ctl_trace_recording_file(struct trace_recording *r);
/* A file's first event is the one after its ClockSyncEvent and span; a
 * file that names no recording begins a new one. */
enum trace_recording_step d9ctl_trace_recording_event(struct trace_recording *r, const struct d9_dec_event *ev);
void d9ctl_trace_recording_clear(struct trace_recording *r);

/* Names of callchain addresses: the depth-0 entries (the function that
 * contains the address; inlined callers are not kept). */
struct trace_symbol {
        uint64_t addr;
        char *name;
};
struct trace_symbols {
        struct trace_symbol *v;
        size_t n, cap;
};

/* Keeps ev if it is a SymbolTableEntry; 0 or -ENOMEM. */
int d9ctl_trace_symbols_add(struct trace_symbols *t, const struct d9_dec_event *ev);
/* Once all are added, before any lookup. */
void d9ctl_trace_symbols_sort(struct trace_symbols *t);
/* The name of exactly addr, or NULL. */
const char *d9ctl_trace_symbols_name(const struct trace_symbols *t, uint64_t addr);
void d9ctl_trace_symbols_clear(struct trace_symbols *t);

/* Loads path, collects its symbol table into syms (cleared first, sorted),
 * then decodes it again calling on_event: names are appended after the
 * events that use them, so an exporter needs them before the first event. */
int d9ctl_trace_read_with_symbols(const char *path, struct trace_symbols *syms,
                            int (*on_event)(const struct d9_dec_event *ev, void *ctx), void *ctx,
                            char *why, size_t why_len);

/* p[0..len) as a JSON string, quotes included; _chars leaves them out (to
 * join several parts in one string). */
void d9ctl_trace_json_string(FILE *out, const char *p, size_t len);
void d9ctl_trace_json_chars(FILE *out, const char *p, size_t len);
