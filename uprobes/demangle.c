/* demangle: Rust symbol names to the normalized text the probe table matches.
 *
 * libiberty's rust_demangle (binutils >= 2.36) understands both manglings:
 * legacy `_ZN...17h<hash>E` and v0 `_R...`. Without DMGL_VERBOSE it already
 * drops the legacy hash; we additionally drop `.llvm.<N>` / other `.suffix`
 * clones that LLVM appends, so one function has one name whatever the build. */
#include <libiberty/demangle.h>
#include <string.h>

#include "uprobes_int.h"

/* LLVM clones get `.llvm.123`, `.cold`, `.part.0` ... after the mangled
 * name. v0 names never contain '.', so cut at the first one; legacy names
 * use ".." inside (for "::" in generic arguments), so there cut only after
 * the closing `17h<16 hex>E` hash. */
static char *without_clone_suffix(const char *mangled, bool v0)
{
        const char *cut = NULL;

        if (v0) {
                cut = strchr(mangled, '.');
        } else {
                for (const char *p = strstr(mangled, "17h"); p; p = strstr(p + 1, "17h")) {
                        size_t k = 3;

                        while (k < 19 && strchr("0123456789abcdef", p[k]) && p[k])
                                k++;
                        if (k == 19 && p[19] == 'E' && p[20] == '.')
                                cut = p + 20;
                }
        }
        return cut ? strndup(mangled, (size_t)(cut - mangled)) : strdup(mangled);
}

static bool looks_legacy_hash(const char *s)
{
        if (strncmp(s, "::h", 3) != 0 || strlen(s) != 19)
                return false;
        for (int i = 3; i < 19; i++)
                if (!strchr("0123456789abcdef", s[i]))
                        return false;
        return true;
}

char *rust_demangle_normalized(const char *mangled, bool *is_v0)
{
        char *base, *out;
        size_t len;

        *is_v0 = strncmp(mangled, "_R", 2) == 0;
        if (!*is_v0 && strncmp(mangled, "_ZN", 3) != 0)
                return strdup(mangled);
        base = without_clone_suffix(mangled, *is_v0);
        if (!base)
                return NULL;
        out = rust_demangle(base, 0);
        if (!out) {
                /* Not Rust after all (a C++ _ZN name): keep the raw text. */
                return base;
        }
        free(base);
        /* Older libiberty keeps the hash; strip it the same way. */
        len = strlen(out);
        if (len > 19 && looks_legacy_hash(out + len - 19))
                out[len - 19] = 0;
        return out;
}
