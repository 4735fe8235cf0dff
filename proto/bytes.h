/* Little-endian and LEB128 primitives shared by the encoder and decoder
 * (trace-format.md section 1). Internal to proto/. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define d9_likely(x) __builtin_expect(!!(x), 1)
#define d9_unlikely(x) __builtin_expect(!!(x), 0)

#define D9_MAGIC "TRC\0"
#define D9_HEADER_LEN 5
#define D9_VERSION_BYTE 1

enum d9_frame_tag {
        D9_TAG_SCHEMA = 0x01,
        D9_TAG_EVENT = 0x02,
        D9_TAG_STRING_POOL = 0x03,
        D9_TAG_STACK_POOL = 0x04,
        D9_TAG_TS_RESET = 0x05,
        D9_TAG_ANNOTATIONS = 0x06,
        D9_TAG_HEADER = 0x54,
};

#define D9_MAX_DELTA 0xFFFFFFu

/* Byte-wise stores: compilers fuse them into one unaligned store on x86 and
 * they stay correct on big-endian hosts. */
static inline uint8_t *put_u16(uint8_t *p, uint16_t v)
{
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        return p + 2;
}

static inline uint8_t *put_u24(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        return p + 3;
}

static inline uint8_t *put_u32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
        return p + 4;
}

static inline uint8_t *put_u64(uint8_t *p, uint64_t v)
{
        put_u32(p, (uint32_t)v);
        return put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint8_t *put_uleb(uint8_t *p, uint64_t v)
{
        /* Worker ids, queue lengths and most task ids take one or two bytes:
         * straight-line code for those keeps the event fast paths branch-light. */
        if (d9_likely(v < 0x80)) {
                *p = (uint8_t)v;
                return p + 1;
        }
        if (v < 0x4000) {
                p[0] = (uint8_t)(v | 0x80);
                p[1] = (uint8_t)(v >> 7);
                return p + 2;
        }
        while (v >= 0x80) {
                *p++ = (uint8_t)(v | 0x80);
                v >>= 7;
        }
        *p++ = (uint8_t)v;
        return p;
}

static inline size_t uleb_len(uint64_t v)
{
        size_t n = 1;

        while (v >= 0x80) {
                v >>= 7;
                n++;
        }
        return n;
}

static inline uint16_t get_u16(const uint8_t *p)
{
        return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t get_u24(const uint8_t *p)
{
        return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16);
}

static inline uint32_t get_u32(const uint8_t *p)
{
        return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
               ((uint32_t)p[3] << 24);
}

static inline uint64_t get_u64(const uint8_t *p)
{
        return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32);
}

/* Returns bytes consumed; 0 if the input ends first, -1 if a 10th byte
 * still has its continuation bit (the Rust reader rejects that too). */
static inline int get_uleb(const uint8_t *p, size_t avail, uint64_t *out)
{
        uint64_t r = 0;
        unsigned shift = 0;

        for (size_t i = 0; i < 10; i++) {
                if (i >= avail)
                        return 0;
                r |= (uint64_t)(p[i] & 0x7f) << shift;
                shift += 7;
                if (!(p[i] & 0x80)) {
                        *out = r;
                        return (int)i + 1;
                }
        }
        return -1;
}
