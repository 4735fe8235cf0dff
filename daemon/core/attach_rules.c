/* attach_rules.c: parsing and matching auto-attach rules.
 *
 *   attach = exe:d9-target-1.24-release
 *   attach = exe:/usr/bin/api-server probes=poll,sched
 *   attach = cgroup:/kubepods.slice/kubepods-burstable.slice
 *   attach = unit:payments.service probes=all
 *
 * exe: matches the file the process runs, by basename, or by its whole
 * path as the process itself sees it (a container's path, inside its own
 * root). Any user can name a binary anything: exe: rules attach to every
 * user's processes, which is what root asked for; scope with cgroup: or
 * unit: where that matters.
 *
 * unit: matches only where every cgroup above the unit's is a slice, which
 * is how PID 1 lays out system units. A user's own systemd (user@.service)
 * may create cgroups of any name under its delegated tree, so a cgroup
 * named "payments.service" below user@1000.service never matches. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/attach_rules.h"
#include "proto/d9control.h"

static bool ends_with(const char *s, const char *suffix)
{
        size_t n = strlen(s), m = strlen(suffix);

        return n >= m && !strcmp(s + n - m, suffix);
}

/* An absolute cgroup path without "." or ".." components, "//" or a
 * trailing slash (so prefix matching means "at or below"). */
static bool cgroup_path_ok(const char *p)
{
        if (p[0] != '/' || (p[1] && ends_with(p, "/")) || strstr(p, "//"))
                return false;
        for (const char *c = p; (c = strchr(c, '/')); c++)
                if (!strncmp(c, "/./", 3) || !strcmp(c, "/.") || !strncmp(c, "/../", 4) || !strcmp(c, "/.."))
                        return false;
        return true;
}

static int rule_pattern_check(struct attach_rule *r, const char **why)
{
        const char *p = r->pattern;

        switch (r->kind) {
        case ATTACH_EXE:
                *why = "exe: expects a file name or an absolute path";
                return *p && (p[0] == '/' || !strchr(p, '/')) ? 0 : -EINVAL;
        case ATTACH_CGROUP:
                *why = "cgroup: expects an absolute cgroup v2 path such as /system.slice/app.service";
                return cgroup_path_ok(p) ? 0 : -EINVAL;
        case ATTACH_UNIT:
                *why = "unit: expects a unit name such as app.service";
                return ends_with(p, ".service") && strlen(p) > 8 && !strchr(p, '/') ? 0 : -EINVAL;
        }
        return -EINVAL;
}

static int rule_parse(struct attach_rule *r, const char *value, const char **why)
{
        static const struct { const char *prefix; enum attach_match kind; } kinds[] = {
                { "exe:", ATTACH_EXE }, { "cgroup:", ATTACH_CGROUP }, { "unit:", ATTACH_UNIT },
        };
        const char *sp = strpbrk(value, " \t"), *opt;
        size_t len = sp ? (size_t)(sp - value) : strlen(value), i;
        char probes[96];

        *why = "expected exe:NAME, cgroup:PATH or unit:NAME.service, then optionally probes=LIST";
        for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
                if (!strncmp(value, kinds[i].prefix, strlen(kinds[i].prefix)))
                        break;
        if (i == sizeof(kinds) / sizeof(kinds[0]))
                return -EINVAL;
        size_t plen = strlen(kinds[i].prefix);
        if (len - plen >= sizeof(r->pattern))
                return -EINVAL;
        r->kind = kinds[i].kind;
        memcpy(r->pattern, value + plen, len - plen);
        r->pattern[len - plen] = 0;
        if (rule_pattern_check(r, why) < 0)
                return -EINVAL;
        r->probes = d9c_parse_probes(NULL, NULL);
        for (opt = sp; opt && *(opt += strspn(opt, " \t"));) {
                size_t olen = strcspn(opt, " \t");

                *why = "expected probes=LIST (sched,cpu,park,poll,spawn,wake,terminate or all) after the match";
                if (olen < 8 || strncmp(opt, "probes=", 7) || olen - 7 >= sizeof(probes))
                        return -EINVAL;
                memcpy(probes, opt + 7, olen - 7);
                probes[olen - 7] = 0;
                r->probes = d9c_parse_probes(probes, NULL);
                if (r->probes < 0)
                        return -EINVAL;
                opt += olen;
        }
        d9c_format_probes(r->probes, probes, sizeof(probes));
        snprintf(r->text, sizeof(r->text), "%s%s%s%s", kinds[i].prefix, r->pattern,
                 r->probes == d9c_parse_probes(NULL, NULL) ? "" : " probes=",
                 r->probes == d9c_parse_probes(NULL, NULL) ? "" : probes);
        return 0;
}

int d9d_attach_rules_add(struct attach_rules *rules, const char *value, const char **why)
{
        struct attach_rule r = { 0 }, *v;

        if (rule_parse(&r, value, why) < 0)
                return -EINVAL;
        *why = "too many attach rules (at most 64)";
        if (rules->n >= ATTACH_RULES_MAX)
                return -EINVAL;
        v = realloc(rules->v, (rules->n + 1) * sizeof(*v));
        if (!v) {
                *why = "out of memory";
                return -EINVAL;
        }
        rules->v = v;
        rules->v[rules->n++] = r;
        return 0;
}

void d9d_attach_rules_free(struct attach_rules *rules)
{
        free(rules->v);
        rules->v = NULL;
        rules->n = 0;
}

static bool exe_matches(const char *pattern, const char *exe)
{
        const char *base = strrchr(exe, '/');

        if (pattern[0] == '/')
                return !strcmp(pattern, exe);
        return !strcmp(pattern, base ? base + 1 : exe);
}

static bool cgroup_at_or_below(const char *top, const char *cg)
{
        size_t n = strlen(top);

        if (!strcmp(top, "/"))
                return cg[0] == '/';
        return !strncmp(cg, top, n) && (cg[n] == 0 || cg[n] == '/');
}

/* /a.slice/b.slice/NAME(/...): every component before NAME a slice. */
static bool cgroup_in_system_unit(const char *unit, const char *cg)
{
        size_t ulen = strlen(unit);

        for (const char *c = cg; *c == '/';) {
                const char *name = c + 1, *end = strchrnul(name, '/');
                size_t len = (size_t)(end - name);

                if (len == ulen && !strncmp(name, unit, len))
                        return true;
                if (len < 6 || strncmp(end - 6, ".slice", 6))
                        return false;
                c = end;
        }
        return false;
}

struct attach_rule *d9d_attach_rules_match(const struct attach_rules *rules, const char *exe, const char *cgroup)
{
        for (size_t i = 0; i < rules->n; i++) {
                struct attach_rule *r = &rules->v[i];
                bool hit = false;

                switch (r->kind) {
                case ATTACH_EXE: hit = exe[0] && exe_matches(r->pattern, exe); break;
                case ATTACH_CGROUP: hit = cgroup[0] && cgroup_at_or_below(r->pattern, cgroup); break;
                case ATTACH_UNIT: hit = cgroup[0] && cgroup_in_system_unit(r->pattern, cgroup); break;
                }
                if (hit)
                        return r;
        }
        return NULL;
}
