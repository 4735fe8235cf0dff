/* control.c: encoding, decoding and validation of d9ctl <-> d9d control
 * messages, plus the unit parsers both sides share (durations, sizes,
 * probe lists) so that d9ctl and d9d.conf accept the same spellings. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "d9control.h"
#include "d9proto.h"

/* Index = bit; NULL: a bit no user names. */
static const char *const probe_group_names[] = {
        "sched", "cpu", "park", "poll", "spawn", "wake", "terminate", NULL, "longpoll",
};

json_t *d9c_request(const char *cmd)
{
        return json_pack("{s:i,s:s}", "v", D9_CONTROL_VERSION, "cmd", cmd);
}

json_t *d9c_ok(void)
{
        return json_pack("{s:i,s:b}", "v", D9_CONTROL_VERSION, "ok", 1);
}

json_t *d9c_error(const char *fmt, ...)
{
        char msg[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return json_pack("{s:i,s:b,s:s}", "v", D9_CONTROL_VERSION, "ok", 0, "error", msg);
}

char *d9c_encode_line(const json_t *obj, size_t *len)
{
        char *s = json_dumps(obj, JSON_COMPACT);
        size_t n;

        if (!s)
                return NULL;
        n = strlen(s);
        char *line = realloc(s, n + 2);
        if (!line) {
                free(s);
                return NULL;
        }
        line[n] = '\n';
        line[n + 1] = 0;
        *len = n + 1;
        return line;
}

json_t *d9c_parse_request(const char *line, size_t len, char *why, size_t why_len)
{
        json_error_t jerr;
        json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
        json_t *v;

        if (!req) {
                snprintf(why, why_len, "malformed JSON: %s", jerr.text);
                return NULL;
        }
        if (!json_is_object(req)) {
                snprintf(why, why_len, "request must be a JSON object");
                goto bad;
        }
        v = json_object_get(req, "v");
        if (!json_is_integer(v) || json_integer_value(v) != D9_CONTROL_VERSION) {
                snprintf(why, why_len, "unsupported protocol version (this d9d speaks v%d)",
                         D9_CONTROL_VERSION);
                goto bad;
        }
        if (!json_is_string(json_object_get(req, "cmd"))) {
                snprintf(why, why_len, "request has no \"cmd\" string");
                goto bad;
        }
        return req;
bad:
        json_decref(req);
        return NULL;
}

int d9c_parse_probes(const char *list, const char **bad)
{
        const size_t n = sizeof(probe_group_names) / sizeof(probe_group_names[0]);
        int mask = 0;
        const char *p = list;

        if (!list || !strcmp(list, "default"))
                return D9_PROBE_DEFAULT;
        if (!strcmp(list, "all"))
                return D9_PROBE_ALL;
        while (*p) {
                size_t len = strcspn(p, ",");
                size_t i;

                for (i = 0; i < n; i++)
                        if (probe_group_names[i] && strlen(probe_group_names[i]) == len &&
                            !strncmp(p, probe_group_names[i], len))
                                break;
                if (len == 3 && !strncmp(p, "all", 3))
                        mask |= D9_PROBE_ALL;
                else if (len == 7 && !strncmp(p, "default", 7))
                        mask |= D9_PROBE_DEFAULT;
                else if (i == n) {
                        if (bad)
                                *bad = p;
                        return -EINVAL;
                } else
                        mask |= 1 << i;
                p += len;
                if (*p == ',')
                        p++;
        }
        return mask ? mask : -EINVAL;
}

void d9c_format_probes(int mask, char *buf, size_t len)
{
        size_t off = 0;

        buf[0] = 0;
        if ((mask & D9_PROBE_ALL) == D9_PROBE_ALL) {
                snprintf(buf, len, "all%s", mask & D9_PROBE_RUNS ? ",longpoll" : "");
                return;
        }
        for (size_t i = 0; i < sizeof(probe_group_names) / sizeof(probe_group_names[0]); i++)
                if (probe_group_names[i] && mask & (1 << i) && off < len)
                        off += snprintf(buf + off, len - off, "%s%s", off ? "," : "", probe_group_names[i]);
}

static int parse_scaled(const char *s, uint64_t *out, const char *const *units,
                        const uint64_t *scale, size_t n_units, uint64_t bare)
{
        char *end;
        unsigned long long v;

        if (!s || !*s || *s == '-')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || end == s)
                return -EINVAL;
        if (!*end) {
                *out = v * bare;
                return 0;
        }
        for (size_t i = 0; i < n_units; i++) {
                if (!strcmp(end, units[i])) {
                        if (v > UINT64_MAX / scale[i])
                                return -ERANGE;
                        *out = v * scale[i];
                        return 0;
                }
        }
        return -EINVAL;
}

int d9_parse_duration_ms(const char *s, uint64_t *ms)
{
        static const char *const u[] = { "ms", "s", "m", "h" };
        static const uint64_t k[] = { 1, 1000, 60000, 3600000 };

        return parse_scaled(s, ms, u, k, 4, 1000);
}

int d9_parse_offcpu_min_us(const char *s, uint64_t *us)
{
        static const char *const u[] = { "us", "ms", "s" };
        static const uint64_t k[] = { 1, 1000, 1000000 };
        uint64_t v;
        int r = parse_scaled(s, &v, u, k, 3, 1);

        if (r == 0 && v > D9_OFFCPU_MIN_US_MAX)
                r = -ERANGE;
        if (r == 0)
                *us = v;
        return r;
}

int d9_parse_size(const char *s, uint64_t *bytes)
{
        static const char *const u[] = { "K", "M", "G", "T", "k", "KiB", "MiB", "GiB" };
        static const uint64_t k[] = { 1ull << 10, 1ull << 20, 1ull << 30, 1ull << 40,
                                      1ull << 10, 1ull << 10, 1ull << 20, 1ull << 30 };

        return parse_scaled(s, bytes, u, k, 8, 1);
}

int d9c_connect(const char *path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

json_t *d9c_call(int fd, const json_t *req, int *err)
{
        size_t len, cap = 4096, used = 0;
        char *line = d9c_encode_line(req, &len), *buf;
        json_t *resp = NULL;

        int sent = line ? d9_write_all(fd, line, len) : -ENOMEM;

        free(line);
        /* A peer that refuses a connection (d9d at its connection or
         * descriptor limits) writes one error line and closes before reading
         * the request: that line is still there to read. */
        if (sent < 0 && sent != -EPIPE && sent != -ECONNRESET) {
                *err = sent;
                return NULL;
        }
        *err = 0;
        buf = malloc(cap);
        for (;;) {
                if (!buf) {
                        *err = -ENOMEM;
                        return NULL;
                }
                ssize_t r = recv(fd, buf + used, cap - used, 0);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0) {
                        *err = sent < 0 ? sent : r < 0 ? -errno : -ECONNRESET;
                        break;
                }
                used += (size_t)r;
                char *nl = memchr(buf, '\n', used);
                if (nl) {
                        json_error_t jerr;
                        resp = json_loadb(buf, (size_t)(nl - buf), 0, &jerr);
                        if (!resp || !json_is_object(resp)) {
                                json_decref(resp);
                                resp = NULL;
                                *err = -EBADMSG;
                        }
                        break;
                }
                if (used == cap) {
                        char *bigger = realloc(buf, cap * 2);
                        if (!bigger)
                                free(buf);
                        buf = bigger;
                        cap *= 2;
                }
        }
        free(buf);
        return resp;
}
