/* segment_name: trace.N.bin.active and its sealed names (segment_name.c). */
#pragma once

#include <stddef.h>

/* Name helpers shared by the segment writer, sealing and recovery. */
int d9d_segment_index_of(const char *name);        /* N of "trace.N.bin*", or -1 */
int d9d_segment_sealed_path(const char *active, const char *suffix, char *out, size_t len);
