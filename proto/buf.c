/* buf.c: struct d9_buf and d9_strdupf (d9proto.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"

int d9_buf_reserve(struct d9_buf *b, size_t extra)
{
        if (b->len + extra + 1 <= b->cap)
                return 0;
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + extra + 1)
                cap *= 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->cap = cap;
        return 0;
}

int d9_buf_append(struct d9_buf *b, const void *data, size_t len)
{
        if (d9_buf_reserve(b, len) < 0)
                return -ENOMEM;
        if (len)
                memcpy(b->data + b->len, data, len);
        b->len += len;
        b->data[b->len] = 0;
        return 0;
}

void d9_buf_free(struct d9_buf *b)
{
        free(b->data);
        *b = (struct d9_buf){ 0 };
}

char *d9_strdupf(const char *fmt, ...)
{
        va_list ap;
        char *s;

        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;       /* vasprintf leaves s undefined then */
        va_end(ap);
        return s;
}
