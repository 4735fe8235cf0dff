/* A protobuf writer just big enough for pprof's profile.proto: varint and
 * length-delimited fields, packed repeated varints, nested messages built
 * in their own buffer and appended, and a string table with indexes. An
 * allocation failure is sticky and reported by d9ctl_pb_message / the caller. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "d9proto.h"

struct pb {
        struct d9_buf buf;
        bool failed;
};
#define PB_INIT { 0 }

void d9ctl_pb_uint(struct pb *b, unsigned field, uint64_t v);
void d9ctl_pb_bytes(struct pb *b, unsigned field, const void *p, size_t len);
void d9ctl_pb_packed(struct pb *b, unsigned field, const uint32_t *v, size_t n);
/* Appends child as field of parent and frees child. 0 or -ENOMEM. */
int d9ctl_pb_message(struct pb *parent, unsigned field, struct pb *child);
void d9ctl_pb_free(struct pb *b);

/* Strings by index; index 0 is "" as profile.proto requires. */
struct pb_strings {
        char **v;
        uint32_t *lens;
        size_t n, cap;
        uint32_t *slots; /* index + 1, 0 = empty */
        size_t nslots;
};
int d9ctl_pb_strings_init(struct pb_strings *s);
int d9ctl_pb_strings_index(struct pb_strings *s, const char *p, size_t len, uint32_t *index);
/* Every string in index order as repeated field. 0 or -ENOMEM. */
int d9ctl_pb_strings_write(const struct pb_strings *s, struct pb *out, unsigned field);
void d9ctl_pb_strings_free(struct pb_strings *s);
