/* The handful of S3 XML elements d9s3 reads and writes. S3 answers are flat
 * and machine-made, so a tag scanner is enough; no XML library needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/ship/s3/s3_int.h"

static const struct {
        const char *entity;
        char c;
} entities[] = { { "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' }, { "&apos;", '\'' } };

static char *decode(const char *s, size_t len)
{
        char *out = malloc(len + 1), *o = out;
        if (!out)
                return NULL;
        for (size_t i = 0; i < len;) {
                size_t k, n = sizeof entities / sizeof entities[0];
                for (k = 0; k < n; k++) {
                        size_t el = strlen(entities[k].entity);
                        if (i + el <= len && !memcmp(s + i, entities[k].entity, el)) {
                                *o++ = entities[k].c;
                                i += el;
                                break;
                        }
                }
                if (k == n)
                        *o++ = s[i++];
        }
        *o = 0;
        return out;
}

char *s3_xml_next(const char *doc, const char **pos, const char *tag)
{
        char open[64], close[64];
        snprintf(open, sizeof open, "<%s>", tag);
        snprintf(close, sizeof close, "</%s>", tag);
        const char *start = strstr(*pos, open);
        if (!start)
                return NULL;
        start += strlen(open);
        const char *end = strstr(start, close);
        if (!end)
                return NULL;
        *pos = end + strlen(close);
        return decode(start, (size_t)(end - start));
}

char *s3_xml_escape(const char *s)
{
        size_t len = 0;
        for (const char *p = s; *p; p++)
                len += strchr("&<>\"'", *p) ? 6 : 1;
        char *out = malloc(len + 1), *o = out;
        if (!out)
                return NULL;
        for (const char *p = s; *p; p++) {
                const char *e = NULL;
                for (size_t k = 0; k < sizeof entities / sizeof entities[0]; k++)
                        if (entities[k].c == *p)
                                e = entities[k].entity;
                if (e) {
                        strcpy(o, e);
                        o += strlen(e);
                } else {
                        *o++ = *p;
                }
        }
        *o = 0;
        return out;
}
