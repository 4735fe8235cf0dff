/* pb_writer.c: see pb_writer.h. */
#include "pb_writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(struct pb *b, size_t more)
{
        if (!b->failed && d9_buf_reserve(&b->buf, more) < 0)
                b->failed = true;
        return !b->failed;
}

static void varint(struct pb *b, uint64_t v)
{
        if (!reserve(b, 10))
                return;
        do {
                uint8_t byte = v & 0x7f;
                v >>= 7;
                b->buf.data[b->buf.len++] = byte | (v ? 0x80 : 0);
        } while (v);
}

static void key(struct pb *b, unsigned field, unsigned wire)
{
        varint(b, ((uint64_t)field << 3) | wire);
}

void d9ctl_pb_uint(struct pb *b, unsigned field, uint64_t v)
{
        key(b, field, 0);
        varint(b, v);
}

void d9ctl_pb_bytes(struct pb *b, unsigned field, const void *p, size_t len)
{
        key(b, field, 2);
        varint(b, len);
        if (len && reserve(b, len)) {
                memcpy(b->buf.data + b->buf.len, p, len);
                b->buf.len += len;
        }
}

void d9ctl_pb_packed(struct pb *b, unsigned field, const uint32_t *v, size_t n)
{
        struct pb body = PB_INIT;

        for (size_t i = 0; i < n; i++)
                varint(&body, v[i]);
        d9ctl_pb_message(b, field, &body);
}

int d9ctl_pb_message(struct pb *parent, unsigned field, struct pb *child)
{
        if (child->failed)
                parent->failed = true;
        else
                d9ctl_pb_bytes(parent, field, child->buf.data, child->buf.len);
        d9ctl_pb_free(child);
        return parent->failed ? -ENOMEM : 0;
}

void d9ctl_pb_free(struct pb *b)
{
        d9_buf_free(&b->buf);
        b->failed = false;
}

static uint64_t hash(const char *p, size_t len)
{
        uint64_t h = 1469598103934665603ull; /* FNV-1a */

        for (size_t i = 0; i < len; i++)
                h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
        return h;
}

static void place(struct pb_strings *s, uint32_t index)
{
        size_t j = hash(s->v[index], s->lens[index]) & (s->nslots - 1);

        while (s->slots[j])
                j = (j + 1) & (s->nslots - 1);
        s->slots[j] = index + 1;
}

int d9ctl_pb_strings_init(struct pb_strings *s)
{
        uint32_t zero;

        *s = (struct pb_strings){ 0 };
        return d9ctl_pb_strings_index(s, "", 0, &zero);
}

int d9ctl_pb_strings_index(struct pb_strings *s, const char *p, size_t len, uint32_t *index)
{
        if ((s->n + 1) * 2 > s->nslots) {
                size_t n = s->nslots ? s->nslots * 2 : 1024;
                uint32_t *slots = calloc(n, sizeof(*slots));
                if (!slots)
                        return -ENOMEM;
                free(s->slots);
                s->slots = slots;
                s->nslots = n;
                for (size_t i = 0; i < s->n; i++)
                        place(s, (uint32_t)i);
        }
        size_t j = hash(p, len) & (s->nslots - 1);
        for (; s->slots[j]; j = (j + 1) & (s->nslots - 1)) {
                uint32_t i = s->slots[j] - 1;
                if (s->lens[i] == len && !memcmp(s->v[i], p, len)) {
                        *index = i;
                        return 0;
                }
        }
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 256;
                char **v = realloc(s->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                s->v = v;
                uint32_t *lens = realloc(s->lens, cap * sizeof(*lens));
                if (!lens)
                        return -ENOMEM;
                s->lens = lens;
                s->cap = cap;
        }
        char *copy = malloc(len + 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, p, len);
        copy[len] = 0;
        s->v[s->n] = copy;
        s->lens[s->n] = (uint32_t)len;
        s->slots[j] = (uint32_t)s->n + 1;
        *index = (uint32_t)s->n++;
        return 0;
}

int d9ctl_pb_strings_write(const struct pb_strings *s, struct pb *out, unsigned field)
{
        for (size_t i = 0; i < s->n; i++)
                d9ctl_pb_bytes(out, field, s->v[i], s->lens[i]);
        return out->failed ? -ENOMEM : 0;
}

void d9ctl_pb_strings_free(struct pb_strings *s)
{
        for (size_t i = 0; i < s->n; i++)
                free(s->v[i]);
        free(s->v);
        free(s->lens);
        free(s->slots);
        *s = (struct pb_strings){ 0 };
}
