/* demangle: symbol names to the text the probe table matches and stack
 * frames show.
 *
 * libiberty's rust_demangle (binutils >= 2.36) understands both Rust
 * manglings: legacy `_ZN...17h<hash>E` and v0 `_R...`. Without DMGL_VERBOSE
 * it already drops the legacy hash; we additionally drop `.llvm.<N>` / other
 * `.suffix` clones that LLVM appends before asking it, so one function has
 * one name whatever the build. What is not Rust goes to the C++ demangler
 * (a Rust binary links C and C++ code; deno carries all of V8). */
#include <libiberty/demangle.h>
#include <stdlib.h>
#include <string.h>

#include "elfsym.h"

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

/* Rust names only: NULL when mangled is not one (or on ENOMEM). */
static char *rust_demangle_normalized(const char *mangled, bool v0)
{
        char *base, *out;
        size_t len;

        if (!v0 && strncmp(mangled, "_ZN", 3) != 0)
                return NULL;
        base = without_clone_suffix(mangled, v0);
        if (!base)
                return NULL;
        out = rust_demangle(base, 0);
        free(base);
        if (!out)
                return NULL;
        /* Older libiberty keeps the hash; strip it the same way. */
        len = strlen(out);
        if (len > 19 && looks_legacy_hash(out + len - 19))
                out[len - 19] = 0;
        return out;
}

char *d9_sym_demangle(const char *raw, bool *is_v0)
{
        bool v0 = strncmp(raw, "_R", 2) == 0;
        char *out = rust_demangle_normalized(raw, v0);

        if (is_v0)
                *is_v0 = v0;
        if (!out)
                out = cplus_demangle(raw, DMGL_PARAMS | DMGL_AUTO);
        return out ? out : strdup(raw);
}

/* ".NAME.<digits>" at the end of raw, or ".NAME" when bare is allowed. */
static bool ends_with_part(const char *raw, const char *name, bool bare)
{
        size_t n = strlen(name);

        for (const char *p = strstr(raw, name); p; p = strstr(p + 1, name)) {
                const char *q = p + n;

                if (p == raw || p[-1] != '.')
                        continue;
                if (!*q && bare)
                        return true;
                if (*q++ != '.' || !*q)
                        continue;
                while (*q >= '0' && *q <= '9')
                        q++;
                if (!*q)
                        return true;
        }
        return false;
}

bool d9_sym_not_an_entry(const char *raw)
{
        return ends_with_part(raw, "cold", true) || ends_with_part(raw, "org", false);
}
