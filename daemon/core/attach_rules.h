/* attach_rules: the "attach = ..." lines of d9d.conf, and whether a
 * process matches one. Parsed at start and at each reload (SIGHUP); matched against facts read
 * from /proc through a pidfd (daemon/record/proc_facts.h), never against a
 * path opened on a process's behalf. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum attach_match {
        ATTACH_EXE,     /* exe:NAME (basename) or exe:/PATH (in the process's own root) */
        ATTACH_CGROUP,  /* cgroup:/PATH: that cgroup v2 or one below it */
        ATTACH_UNIT,    /* unit:NAME.service: a system unit's cgroup (or below) */
};

struct attach_rule {
        enum attach_match kind;
        char pattern[256];
        int probes;             /* enum d9_probe_group mask */
        char text[384];         /* the rule as written, normalized: what list shows */
        /* Counted by autoattach.c, shown by status. */
        uint64_t matched, attached, exited_first, failed, capped;
        bool added_by_reload;   /* new in the last reload: its rescan looks for this rule only */
};

struct attach_rules {
        struct attach_rule *v;
        size_t n;
        unsigned max_targets;   /* auto-attached sessions live or starting at once */
};

#define ATTACH_RULES_MAX 64
#define ATTACH_DEFAULT_MAX_TARGETS 16

/* Parse one "KIND:PATTERN [probes=LIST]" value and append it. Returns 0,
 * or -EINVAL with *why set. */
int d9d_attach_rules_add(struct attach_rules *rules, const char *value, const char **why);
void d9d_attach_rules_free(struct attach_rules *rules);
/* The first rule a process running exe (its exe link, "" for none) in
 * cgroup (its cgroup v2 path, "" for none) matches, or NULL. */
struct attach_rule *d9d_attach_rules_match(const struct attach_rules *rules, const char *exe, const char *cgroup);
