/* ListObjectsV2 over all pages, with prefix and delimiter. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/ship/s3/s3_int.h"

/* Raw (undecoded) copy of the next <tag>...</tag> block's inside. */
static char *next_block(const char **pos, const char *tag)
{
        char open[64], close[64];
        snprintf(open, sizeof open, "<%s>", tag);
        snprintf(close, sizeof close, "</%s>", tag);
        const char *start = strstr(*pos, open);
        const char *end = start ? strstr(start, close) : NULL;
        if (!end)
                return NULL;
        start += strlen(open);
        *pos = end + strlen(close);
        return strndup(start, (size_t)(end - start));
}

static int grow(void **arr, size_t n, size_t elem)
{
        if (n & (n - 1)) /* capacity doubles at powers of two */
                return 0;
        void *p = realloc(*arr, (n ? 2 * n : 1) * elem);
        if (!p)
                return -ENOMEM;
        *arr = p;
        return 0;
}

static int add_object(struct s3_listing *l, const char *block)
{
        const char *p = block;
        char *key = s3_xml_next(block, &p, "Key");
        p = block;
        char *size = s3_xml_next(block, &p, "Size");
        p = block;
        char *mtime = s3_xml_next(block, &p, "LastModified");
        int err = key ? grow((void **)&l->objects, l->n_objects, sizeof *l->objects) : -EBADMSG;
        if (err == 0)
                l->objects[l->n_objects++] = (struct s3_object){
                        .key = key, .size = size ? strtoull(size, NULL, 10) : 0,
                        .last_modified = mtime,
                };
        free(size);
        if (err) {
                free(key);
                free(mtime);
        }
        return err;
}

static int add_prefix(struct s3_listing *l, const char *block)
{
        const char *p = block;
        char *prefix = s3_xml_next(block, &p, "Prefix");
        int err = prefix ? grow((void **)&l->prefixes, l->n_prefixes, sizeof *l->prefixes) : -EBADMSG;
        if (err == 0)
                l->prefixes[l->n_prefixes++] = prefix;
        else
                free(prefix);
        return err;
}

/* Parses one page; returns 1 and sets *token when another page follows. */
static int parse_page(struct s3_listing *l, const char *doc, char **token)
{
        const char *pos = doc;
        char *block;
        int err = 0;
        while (!err && (block = next_block(&pos, "Contents"))) {
                err = add_object(l, block);
                free(block);
        }
        pos = doc;
        while (!err && (block = next_block(&pos, "CommonPrefixes"))) {
                err = add_prefix(l, block);
                free(block);
        }
        if (err)
                return err;
        pos = doc;
        char *truncated = s3_xml_next(doc, &pos, "IsTruncated");
        int more = truncated && !strcmp(truncated, "true");
        free(truncated);
        free(*token);
        pos = doc;
        *token = more ? s3_xml_next(doc, &pos, "NextContinuationToken") : NULL;
        return *token ? 1 : 0;
}

int s3_list(struct s3_client *c, const char *prefix, const char *delimiter, size_t max_keys,
            struct s3_listing *out)
{
        char *token = NULL;
        int more;
        *out = (struct s3_listing){ 0 };
        do {
                struct s3_query q[5] = { { "list-type", "2" } };
                char page[16];
                size_t n = 1;
                if (c->cfg.list_page_size) {
                        snprintf(page, sizeof page, "%u", c->cfg.list_page_size);
                        q[n++] = (struct s3_query){ "max-keys", page };
                }
                if (prefix && *prefix)
                        q[n++] = (struct s3_query){ "prefix", prefix };
                if (delimiter && *delimiter)
                        q[n++] = (struct s3_query){ "delimiter", delimiter };
                if (token)
                        q[n++] = (struct s3_query){ "continuation-token", token };
                struct d9_buf body = { 0 };
                struct s3_request r = { .method = "GET", .query = q, .n_query = n, .response = &body };
                int err = s3_request_run(c, &r);
                more = err < 0 ? err : parse_page(out, body.data ? (char *)body.data : "", &token);
                d9_buf_free(&body);
                if (more == -EBADMSG)
                        s3_set_error(c, "LIST %s: malformed answer from the server", c->cfg.bucket);
        } while (more == 1 && (!max_keys || out->n_objects < max_keys));
        free(token);
        if (more < 0) {
                s3_listing_free(out);
                return more;
        }
        return 0;
}

void s3_listing_free(struct s3_listing *l)
{
        for (size_t i = 0; i < l->n_objects; i++) {
                free(l->objects[i].key);
                free(l->objects[i].last_modified);
        }
        for (size_t i = 0; i < l->n_prefixes; i++)
                free(l->prefixes[i]);
        free(l->objects);
        free(l->prefixes);
        *l = (struct s3_listing){ 0 };
}
