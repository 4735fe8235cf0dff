/* tokio_version: the Tokio version a binary was built from, read from the
 * source paths rustc embeds in panic locations (`.../tokio-1.43.0/src/...`).
 * Stripping removes symbols, not these strings, so this works on production
 * binaries too. It is informational: probe discovery never depends on it.
 * When several versions are linked in (two major versions in one tree), the
 * most referenced one wins. */
#include <ctype.h>
#include <string.h>

#include "uprobes_int.h"

#define MAX_SEEN 8

struct seen {
        char v[32];
        unsigned count;
};

static void count_version(struct seen *s, size_t *n, const char *v, size_t len)
{
        for (size_t i = 0; i < *n; i++)
                if (strlen(s[i].v) == len && memcmp(s[i].v, v, len) == 0) {
                        s[i].count++;
                        return;
                }
        if (*n < MAX_SEEN) {
                memcpy(s[*n].v, v, len);
                s[*n].v[len] = 0;
                s[(*n)++].count = 1;
        }
}

static bool is_hex_run(const uint8_t *p, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!isxdigit(p[i]))
                        return false;
        return true;
}

/* At p: "tokio-", the version, then "/src"; returns the version's length.
 * Builds from a vendored or content-addressed source tree name the folder
 * `tokio-1.53.1-<sha256>` (deltachat-rpc-server 2.62 from npm, a Nix
 * build): a trailing '-' and 32 or more hex digits are the tree's hash, not
 * part of the version. Pre-release tags (`1.0.0-alpha.1`) stay. */
static size_t version_at(const uint8_t *p, const uint8_t *end)
{
        const uint8_t *v = p + 6, *q = v;

        while (q < end && q - v < 120 && (isalnum(*q) || *q == '.' || *q == '-' || *q == '+'))
                q++;
        if (q == v || !isdigit(*v) || end - q < 4 || memcmp(q, "/src", 4) != 0)
                return 0;
        size_t len = (size_t)(q - v);
        for (size_t i = 0; i < len; i++)
                if (v[i] == '-' && len - i - 1 >= 32 && is_hex_run(v + i + 1, len - i - 1)) {
                        len = i;
                        break;
                }
        return len < 32 ? len : 0;
}

char *uprobes_tokio_version_in(const uint8_t *d, size_t size)
{
        struct seen seen[MAX_SEEN];
        size_t n_seen = 0;
        const uint8_t *end = d + size, *p = d;

        while ((p = memmem(p, (size_t)(end - p), "tokio-", 6))) {
                size_t len = version_at(p, end);

                if (len)
                        count_version(seen, &n_seen, (const char *)p + 6, len);
                p += 6;
        }
        if (!n_seen)
                return NULL;
        size_t best = 0;
        for (size_t i = 1; i < n_seen; i++)
                if (seen[i].count > seen[best].count)
                        best = i;
        return strdup(seen[best].v);
}

char *uprobes_tokio_version_detect(const struct elf_image *img)
{
        /* A BOLT-optimized build keeps the original constants in
         * .bolt.org.rodata; its .rodata holds only what BOLT wrote. */
        static const char *const sections[] = { ".rodata", ".bolt.org.rodata" };
        const uint8_t *d;
        bool any = false;
        size_t size;

        for (size_t i = 0; i < sizeof(sections) / sizeof(*sections); i++) {
                char *v;

                if (!(d = d9_elf_section_data(img, sections[i], &size, NULL)))
                        continue;
                any = true;
                if ((v = uprobes_tokio_version_in(d, size)))
                        return v;
        }
        if (any)
                return NULL;
        /* No section headers: the whole file. */
        d = (const uint8_t *)elf_rawfile(img->elf, &size);
        return d ? uprobes_tokio_version_in(d, size) : NULL;
}
