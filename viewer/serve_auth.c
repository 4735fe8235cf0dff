/* Who may read traces from d9ctl serve: whoever holds the token printed
 * once at start (in the URL, ?token=...), other local users on the same
 * machine do not - a loopback port is open to every uid. The first request
 * carrying it gets a cookie back, so the viewer's own requests (assets,
 * /api/...) need no change; scripts may send "Authorization: Bearer T". */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "serve_int.h"

static int random_hex(char *out, size_t bytes)
{
        unsigned char raw[32];
        size_t got = 0;

        if (bytes > sizeof(raw))
                return -EINVAL;
        while (got < bytes) {
                ssize_t n = getrandom(raw + got, bytes - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                got += (size_t)n;
        }
        for (size_t i = 0; i < bytes; i++)
                sprintf(out + 2 * i, "%02x", raw[i]);
        return 0;
}

int serve_auth_init(struct serve_auth *a)
{
        char id[9];
        int r = random_hex(a->token, SERVE_TOKEN_BYTES);

        if (r == 0)
                r = random_hex(id, 4);
        if (r < 0)
                return r;
        /* cookies are per host, not per port: two servers need two names */
        snprintf(a->cookie, sizeof(a->cookie), "d9_token_%s", id);
        return 0;
}

/* Compares in time independent of where the first difference is. */
static bool token_equal(const struct serve_auth *a, const char *given)
{
        size_t n = strlen(a->token);
        unsigned char diff = 0;

        if (!given || strlen(given) != n)
                return false;
        for (size_t i = 0; i < n; i++)
                diff |= (unsigned char)(given[i] ^ a->token[i]);
        return diff == 0;
}

enum serve_auth_result serve_auth_check(const struct serve_auth *a, struct MHD_Connection *conn)
{
        const char *bearer = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

        if (token_equal(a, MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token")))
                return SERVE_AUTH_SET_COOKIE;
        if (token_equal(a, MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, a->cookie)))
                return SERVE_AUTH_OK;
        if (bearer && strncasecmp(bearer, "Bearer ", 7) == 0 && token_equal(a, bearer + 7))
                return SERVE_AUTH_OK;
        return SERVE_AUTH_DENIED;
}

void serve_auth_cookie_header(const struct serve_auth *a, char *buf, size_t size)
{
        snprintf(buf, size, "%s=%s; Path=/; HttpOnly; SameSite=Strict", a->cookie, a->token);
}
