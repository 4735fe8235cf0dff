/* d9ctl serve: HTTP front of the trace browser (libmicrohttpd, epoll and a
 * small pool of threads: an idle or slow connection costs a socket and a
 * few KiB, not a thread; each times out after SERVE_CONN_TIMEOUT_S).
 * Every request needs the token printed at start (serve_auth.c).
 *
 *   GET /                      the viewer (index.html from the assets dir)
 *   GET /static/<file>         other viewer assets
 *   GET /api/list              JSON list of segments under the served root
 *                              (a local folder, or an S3 bucket + prefix)
 *   GET /api/trace?seg=P[&seg=P...]
 *                              raw trace bytes of the segments, decompressed
 *                              and concatenated (valid per trace-format 2.2)
 *   GET /api/info?seg=P        JSON: the segment's wall-clock start, duration
 *                              and event count (the listing's columns)
 *
 * Every path a client names goes through serve_path_open(). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "serve.h"
#include "serve_int.h"

#define SERVE_THREADS 4
#define SERVE_CONN_TIMEOUT_S 15u
#define SERVE_MAX_CONNS 8192u

enum MHD_Result serve_queue(struct serve_req *rq, unsigned status, const char *type,
                            struct MHD_Response *resp)
{
        char cookie[128];

        MHD_add_response_header(resp, "Content-Type", type);
        MHD_add_response_header(resp, "Cache-Control", "no-store");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer"); /* the token is in the URL */
        /* the viewer needs nothing from the network but this server */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                                "base-uri 'none'; frame-ancestors 'none'");
        if (rq->set_cookie) {
                serve_auth_cookie_header(&rq->ctx->auth, cookie, sizeof(cookie));
                MHD_add_response_header(resp, MHD_HTTP_HEADER_SET_COOKIE, cookie);
        }
        enum MHD_Result r = MHD_queue_response(rq->conn, status, resp);
        MHD_destroy_response(resp);
        return r;
}

static enum MHD_Result reply(struct serve_req *rq, unsigned status, const char *type,
                             void *data, size_t len, int owned)
{
        struct MHD_Response *resp = owned
                ? MHD_create_response_from_buffer_with_free_callback(len, data, free)
                : MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_COPY);
        if (!resp) {
                if (owned)
                        free(data);
                return MHD_NO;
        }
        return serve_queue(rq, status, type, resp);
}

enum MHD_Result serve_reply_error(struct serve_req *rq, unsigned status, const char *what,
                                  const char *path)
{
        char msg[PATH_MAX + 128];
        int n = snprintf(msg, sizeof(msg), "%s%s%s\n", what, path ? ": " : "", path ? path : "");
        return reply(rq, status, "text/plain; charset=utf-8", msg,
                     (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1, 0);
}

enum MHD_Result serve_reply_open_error(struct serve_req *rq, int err, const char *path)
{
        switch (err) {
        case -EINVAL:
                return serve_reply_error(rq, 400, "bad path (must be relative, without '..')", path);
        case -EACCES:
        case -ELOOP:
        case -EPERM:
                return serve_reply_error(rq, 403, "path leaves the served directory", path);
        case -ENOENT:
        case -ENOTDIR:
                return serve_reply_error(rq, 404, "no such segment", path);
        case -EISDIR:
                return serve_reply_error(rq, 400, "path is a directory", path);
        default:
                return serve_reply_error(rq, 500, strerror(-err), path);
        }
}

static const char *content_type_for(const char *name)
{
        static const struct { const char *ext, *type; } types[] = {
                { ".html", "text/html; charset=utf-8" },
                { ".js", "text/javascript; charset=utf-8" },
                { ".css", "text/css; charset=utf-8" },
                { ".svg", "image/svg+xml" },
                { ".json", "application/json" },
        };
        const char *dot = strrchr(name, '.');
        for (size_t i = 0; dot && i < sizeof(types) / sizeof(*types); i++)
                if (strcmp(dot, types[i].ext) == 0)
                        return types[i].type;
        return "application/octet-stream";
}

static enum MHD_Result serve_asset(struct serve_req *rq, const char *name)
{
        struct serve_ctx *ctx = rq->ctx;
        struct d9_buf body = { 0 };
        int fd = serve_path_open(ctx->assetfd, ctx->asset_real, name, strlen(name));
        int r;

        if (fd < 0)
                return serve_reply_open_error(rq, fd, name);
        /* assets are never compressed on disk, so this is a plain read */
        r = d9_read_all(fd, &body, SERVE_MAX_OBJECT);
        close(fd);
        if (r < 0) {
                d9_buf_free(&body);
                return serve_reply_error(rq, 500, "cannot read asset", name);
        }
        return reply(rq, 200, content_type_for(name), body.data, body.len, 1);
}

static enum MHD_Result serve_list(struct serve_req *rq)
{
        struct serve_ctx *ctx = rq->ctx;
        int err = 0;
        json_t *list = ctx->bucket ? serve_bucket_list(ctx->bucket, &err) : serve_list_segments(ctx->rootfd);
        char *text = list ? json_dumps(list, JSON_COMPACT) : NULL;

        json_decref(list);
        if (!text && ctx->bucket && err != -ENOMEM) {
                char msg[512];
                serve_bucket_error(ctx->bucket, msg, sizeof(msg));
                return serve_reply_error(rq, 502, "cannot list the bucket", msg);
        }
        if (!text)
                return serve_reply_error(rq, 500, "cannot list segments", NULL);
        return reply(rq, 200, "application/json", text, strlen(text), 1);
}

/* A loopback server must still refuse requests addressed to another name:
 * a web page can rebind its own DNS name to 127.0.0.1 and would otherwise
 * read the traces through the victim's browser (DNS rebinding). */
static bool host_is_loopback(const char *host)
{
        char name[256];
        size_t n;

        if (!host)
                return true; /* HTTP/1.0 without Host: not a browser */
        if (host[0] == '[') {
                const char *end = strchr(host, ']');
                n = end ? (size_t)(end - host + 1) : strlen(host);
        } else {
                n = strcspn(host, ":");
        }
        if (n == 0 || n >= sizeof(name))
                return false;
        memcpy(name, host, n);
        name[n] = '\0';
        if (strcasecmp(name, "localhost") == 0 || strcmp(name, "[::1]") == 0)
                return true;
        struct in_addr a;
        return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

static enum MHD_Result handle_request(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls)
{
        struct serve_req rq = { .conn = conn, .ctx = cls };
        struct serve_ctx *ctx = cls;

        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
                return serve_reply_error(&rq, 405, "only GET is supported", NULL);
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (ctx->loopback && !host_is_loopback(host))
                return serve_reply_error(&rq, 403, "Host is not a loopback name (DNS rebinding guard); "
                                                   "use http://127.0.0.1:PORT/", host);
        switch (serve_auth_check(&ctx->auth, conn)) {
        case SERVE_AUTH_DENIED:
                return serve_reply_error(&rq, 401, "missing or wrong token: open the URL with ?token= "
                                                   "that d9ctl serve printed when it started", NULL);
        case SERVE_AUTH_SET_COOKIE:
                rq.set_cookie = true;
                break;
        case SERVE_AUTH_OK:
                break;
        }
        if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
                return serve_asset(&rq, "index.html");
        if (strncmp(url, "/static/", 8) == 0)
                return serve_asset(&rq, url + 8);
        if (strcmp(url, "/api/list") == 0)
                return serve_list(&rq);
        if (strcmp(url, "/api/trace") == 0)
                return serve_trace(&rq);
        if (strcmp(url, "/api/info") == 0)
                return serve_info(&rq);
        return serve_reply_error(&rq, 404, "not found", url);
}

/* "HOST:PORT", "[V6]:PORT", "localhost:PORT" or a bare "PORT" (loopback)
 * -> socket address. */
static int parse_listen(const char *listen, struct sockaddr_storage *ss)
{
        char host[INET6_ADDRSTRLEN + 2] = "127.0.0.1";
        const char *colon = strrchr(listen, ':');
        const char *portstr = colon ? colon + 1 : listen;
        char *end;

        if (colon && (size_t)(colon - listen) >= sizeof(host))
                return -EINVAL;
        long port = strtol(portstr, &end, 10);
        if (!*portstr || *end || port < 0 || port > 65535)
                return -EINVAL;
        if (colon) {
                memcpy(host, listen, (size_t)(colon - listen));
                host[colon - listen] = '\0';
        }
        if (!strcmp(host, "localhost") || !*host)
                snprintf(host, sizeof(host), "127.0.0.1");

        memset(ss, 0, sizeof(*ss));
        struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        size_t hl = strlen(host);
        if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
                host[hl - 1] = '\0';
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                return inet_pton(AF_INET6, host + 1, &in6->sin6_addr) == 1 ? 0 : -EINVAL;
        }
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        return inet_pton(AF_INET, host, &in4->sin_addr) == 1 ? 0 : -EINVAL;
}

static unsigned listen_port(const struct sockaddr_storage *ss)
{
        return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port :
                     ((const struct sockaddr_in *)ss)->sin_port);
}

/* Bound here rather than by libmicrohttpd, whose own message names neither
 * the address nor the port. */
static int open_listener(const struct sockaddr_storage *ss, const char *spec)
{
        int one = 1, fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

        if (fd < 0)
                return -errno;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (ss->ss_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        if (bind(fd, (const struct sockaddr *)ss, len) < 0 || listen(fd, 64) < 0) {
                int r = -errno;
                if (r == -EADDRINUSE)
                        fprintf(stderr, "d9ctl serve: port %u is already in use (--listen %s); pick another "
                                        "with --listen PORT, or 0 for any free one\n", listen_port(ss), spec);
                else
                        fprintf(stderr, "d9ctl serve: cannot listen on %s (port %u): %s\n", spec,
                                listen_port(ss), strerror(-r));
                close(fd);
                return r;
        }
        return fd;
}

static int is_loopback(const struct sockaddr_storage *ss)
{
        if (ss->ss_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

static int open_root(const char *path, const char *what, const char *hint, int *fd,
                     char real[PATH_MAX])
{
        *fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (*fd < 0 || !realpath(path, real)) {
                int r = -errno;
                fprintf(stderr, "d9ctl serve: cannot open %s directory %s: %s%s\n", what, path,
                        strerror(errno), hint);
                if (*fd >= 0)
                        close(*fd);
                return r;
        }
        return 0;
}

/* As many connections as descriptors allow (raised to the hard limit):
 * slow or idle clients hold one each until they time out, so the bound is
 * what keeps them from starving the real ones, not a small number. */
static unsigned connection_limit(void)
{
        struct rlimit rl;
        unsigned n = 256;

        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
                if (rl.rlim_cur < rl.rlim_max && rl.rlim_cur < SERVE_MAX_CONNS + 64) {
                        rl.rlim_cur = rl.rlim_max < SERVE_MAX_CONNS + 64 ? rl.rlim_max : SERVE_MAX_CONNS + 64;
                        setrlimit(RLIMIT_NOFILE, &rl);
                        getrlimit(RLIMIT_NOFILE, &rl);
                }
                /* each request keeps one segment open besides its socket */
                if (rl.rlim_cur > 128)
                        n = (unsigned)((rl.rlim_cur - 64) / 2 < SERVE_MAX_CONNS ? (rl.rlim_cur - 64) / 2 : SERVE_MAX_CONNS);
        }
        return n;
}

static void wait_for_stop_signal(void)
{
        sigset_t set;
        int sig;

        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigwait(&set, &sig);
}

int serve_run(const struct serve_config *cfg)
{
        struct serve_ctx ctx = { .rootfd = -1, .assetfd = -1 };
        struct sockaddr_storage addr;
        sigset_t stop;
        int r;

        if (parse_listen(cfg->listen, &addr) < 0) {
                fprintf(stderr, "d9ctl serve: bad --listen '%s' (want HOST:PORT, e.g. 127.0.0.1:3000)\n",
                        cfg->listen);
                return -EINVAL;
        }
        ctx.loopback = is_loopback(&addr);
        if (!ctx.loopback)
                fprintf(stderr, "d9ctl serve: warning: listening on non-loopback %s; traces "
                                "are readable by anyone who can reach it\n", cfg->listen);
        if (cfg->bucket)
                r = serve_bucket_open(cfg, &ctx.bucket);
        else
                r = open_root(cfg->dir, "trace", "", &ctx.rootfd, ctx.root_real);
        if (r < 0)
                return r;
        r = open_root(cfg->assets_dir, "viewer",
                      " (meson install puts the viewer there; or set D9_VIEWER_DIR to a source "
                      "tree's viewer/web)",
                      &ctx.assetfd, ctx.asset_real);
        if (r < 0)
                goto out;
        if (faccessat(ctx.assetfd, "index.html", R_OK, 0) < 0) {
                r = -errno;
                fprintf(stderr, "d9ctl serve: %s/index.html missing; set D9_VIEWER_DIR to the "
                                "viewer's web directory\n", cfg->assets_dir);
                goto out;
        }

        /* Block the stop signals before MHD starts its threads, so they inherit
         * the mask and only sigwait() below sees them. */
        sigemptyset(&stop);
        sigaddset(&stop, SIGINT);
        sigaddset(&stop, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &stop, NULL);

        r = serve_auth_init(&ctx.auth);
        if (r < 0) {
                fprintf(stderr, "d9ctl serve: cannot make a token: %s\n", strerror(-r));
                goto out;
        }
        int lfd = open_listener(&addr, cfg->listen);
        if (lfd < 0) {
                r = lfd;
                goto out;
        }
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
                         (addr.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
        struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, handle_request, &ctx,
                                                MHD_OPTION_LISTEN_SOCKET, lfd,
                                                MHD_OPTION_THREAD_POOL_SIZE, (unsigned)SERVE_THREADS,
                                                MHD_OPTION_CONNECTION_LIMIT, connection_limit(),
                                                MHD_OPTION_CONNECTION_TIMEOUT, SERVE_CONN_TIMEOUT_S,
                                                MHD_OPTION_END);
        if (!d) {
                r = -EADDRNOTAVAIL;
                close(lfd);
                fprintf(stderr, "d9ctl serve: cannot start the web server on %s\n", cfg->listen);
                goto out;
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        char host[INET6_ADDRSTRLEN + 2];
        if (addr.ss_family == AF_INET6) {
                host[0] = '[';
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&addr)->sin6_addr, host + 1, sizeof(host) - 2);
                strcat(host, "]");
        } else {
                inet_ntop(AF_INET, &((struct sockaddr_in *)&addr)->sin_addr, host, sizeof(host));
        }
        printf("serving http://%s:%u/?token=%s from %s%s%s%s\n", host,
               info ? info->port : 0, ctx.auth.token, cfg->bucket ? "s3://" : "",
               cfg->bucket ? cfg->bucket : ctx.root_real,
               cfg->bucket && cfg->prefix ? "/" : "", cfg->bucket && cfg->prefix ? cfg->prefix : "");
        fflush(stdout);

        wait_for_stop_signal();
        MHD_stop_daemon(d);
        r = 0;
out:
        serve_bucket_free(ctx.bucket);
        if (ctx.rootfd >= 0)
                close(ctx.rootfd);
        if (ctx.assetfd >= 0)
                close(ctx.assetfd);
        return r;
}
