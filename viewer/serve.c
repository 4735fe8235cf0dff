/* d9ctl serve: HTTP front of the trace browser (libmicrohttpd, one thread
 * per connection so a large decompression does not stall other requests).
 *
 *   GET /                      the viewer (index.html from the assets dir)
 *   GET /static/<file>         other viewer assets
 *   GET /api/list              JSON list of segments under the served root
 *                              (a local folder, or an S3 bucket + prefix)
 *   GET /api/trace?seg=P[&seg=P...]
 *                              raw trace bytes of the segments, decompressed
 *                              and concatenated (valid per trace-format 2.2)
 *
 * Every path a client names goes through serve_path_open(). */
#include <arpa/inet.h>
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
#include <unistd.h>

#include "serve.h"
#include "serve_int.h"

#define SERVE_MAX_SEGMENTS 256

struct serve_ctx {
        struct serve_bucket *bucket; /* bucket mode; else the local root below */
        int rootfd;
        char root_real[PATH_MAX];
        int assetfd;
        char asset_real[PATH_MAX];
        bool loopback; /* listening on loopback only: insist on a loopback Host */
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
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
        MHD_add_response_header(resp, "Content-Type", type);
        MHD_add_response_header(resp, "Cache-Control", "no-store");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        /* the viewer needs nothing from the network but this server */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                                "base-uri 'none'; frame-ancestors 'none'");
        enum MHD_Result r = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return r;
}

static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status, const char *what,
                                   const char *path)
{
        char msg[PATH_MAX + 128];
        int n = snprintf(msg, sizeof(msg), "%s%s%s\n", what, path ? ": " : "", path ? path : "");
        return reply(conn, status, "text/plain; charset=utf-8", msg,
                     (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1, 0);
}

/* Maps serve_path_open()'s errors to an HTTP status and message. */
static enum MHD_Result reply_open_error(struct MHD_Connection *conn, int err, const char *path)
{
        switch (err) {
        case -EINVAL:
                return reply_error(conn, 400, "bad path (must be relative, without '..')", path);
        case -EACCES:
        case -ELOOP:
        case -EPERM:
                return reply_error(conn, 403, "path leaves the served directory", path);
        case -ENOENT:
        case -ENOTDIR:
                return reply_error(conn, 404, "no such segment", path);
        case -EISDIR:
                return reply_error(conn, 400, "path is a directory", path);
        default:
                return reply_error(conn, 500, strerror(-err), path);
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

static enum MHD_Result serve_asset(struct MHD_Connection *conn, struct serve_ctx *ctx,
                                   const char *name)
{
        struct serve_buf body = { 0 };
        int fd = serve_path_open(ctx->assetfd, ctx->asset_real, name, strlen(name));
        int r;

        if (fd < 0)
                return reply_open_error(conn, fd, name);
        /* assets are never compressed on disk, so this is a plain read */
        r = serve_decompress_append(fd, &body, SERVE_MAX_BODY);
        close(fd);
        if (r < 0) {
                serve_buf_free(&body);
                return reply_error(conn, 500, "cannot read asset", name);
        }
        return reply(conn, 200, content_type_for(name), body.data, body.len, 1);
}

static enum MHD_Result serve_list(struct MHD_Connection *conn, struct serve_ctx *ctx)
{
        int err = 0;
        json_t *list = ctx->bucket ? serve_bucket_list(ctx->bucket, &err) : serve_list_segments(ctx->rootfd);
        char *text = list ? json_dumps(list, JSON_COMPACT) : NULL;

        json_decref(list);
        if (!text && ctx->bucket && err != -ENOMEM) {
                char msg[512];
                serve_bucket_error(ctx->bucket, msg, sizeof(msg));
                return reply_error(conn, 502, "cannot list the bucket", msg);
        }
        if (!text)
                return reply_error(conn, 500, "cannot list segments", NULL);
        return reply(conn, 200, "application/json", text, strlen(text), 1);
}

struct seg_args {
        const char *path[SERVE_MAX_SEGMENTS];
        size_t len[SERVE_MAX_SEGMENTS];
        int count;
        int overflow;
};

static enum MHD_Result collect_seg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size)
{
        struct seg_args *args = cls;

        if (strcmp(key, "seg") != 0)
                return MHD_YES;
        if (args->count == SERVE_MAX_SEGMENTS) {
                args->overflow = 1;
                return MHD_NO;
        }
        args->path[args->count] = value ? value : "";
        args->len[args->count++] = value ? value_size : 0;
        return MHD_YES;
}

/* Appends one segment, decompressed, from the local root or the bucket. */
static int fetch_segment(struct serve_ctx *ctx, const char *path, size_t len, struct serve_buf *body)
{
        if (ctx->bucket)
                return serve_bucket_fetch_append(ctx->bucket, path, len, body, SERVE_MAX_BODY);
        int fd = serve_path_open(ctx->rootfd, ctx->root_real, path, len);
        if (fd < 0)
                return fd;
        int r = serve_decompress_append(fd, body, SERVE_MAX_BODY);
        close(fd);
        return r;
}

static enum MHD_Result serve_trace(struct MHD_Connection *conn, struct serve_ctx *ctx)
{
        struct seg_args args = { 0 };
        struct serve_buf body = { 0 };

        MHD_get_connection_values_n(conn, MHD_GET_ARGUMENT_KIND, collect_seg, &args);
        if (args.overflow)
                return reply_error(conn, 400, "too many segments in one request", NULL);
        if (args.count == 0)
                return reply_error(conn, 400, "missing ?seg=PATH", NULL);
        for (int i = 0; i < args.count; i++) {
                int r = fetch_segment(ctx, args.path[i], args.len[i], &body);
                if (r == -EIO) {
                        char msg[512];
                        serve_buf_free(&body);
                        serve_bucket_error(ctx->bucket, msg, sizeof(msg));
                        return reply_error(conn, 502, "cannot fetch segment from the bucket", msg);
                }
                if (r == -EINVAL || r == -EACCES || r == -ELOOP || r == -EPERM || r == -ENOENT ||
                    r == -ENOTDIR || r == -EISDIR) {
                        serve_buf_free(&body);
                        return reply_open_error(conn, r, args.path[i]);
                }
                if (r < 0) {
                        serve_buf_free(&body);
                        return reply_error(conn, r == -EFBIG ? 413 : 422,
                                           r == -EBADMSG ? "corrupt compressed segment"
                                           : r == -EFBIG ? "segments too large to serve together"
                                           : strerror(-r), args.path[i]);
                }
        }
        return reply(conn, 200, "application/octet-stream", body.data, body.len, 1);
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
        struct serve_ctx *ctx = cls;

        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
                return reply_error(conn, 405, "only GET is supported", NULL);
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (ctx->loopback && !host_is_loopback(host))
                return reply_error(conn, 403, "Host is not a loopback name (DNS rebinding guard); "
                                              "use http://127.0.0.1:PORT/", host);
        if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
                return serve_asset(conn, ctx, "index.html");
        if (strncmp(url, "/static/", 8) == 0)
                return serve_asset(conn, ctx, url + 8);
        if (strcmp(url, "/api/list") == 0)
                return serve_list(conn, ctx);
        if (strcmp(url, "/api/trace") == 0)
                return serve_trace(conn, ctx);
        return reply_error(conn, 404, "not found", url);
}

/* "HOST:PORT" or "[V6]:PORT" -> socket address. */
static int parse_listen(const char *listen, struct sockaddr_storage *ss)
{
        char host[INET6_ADDRSTRLEN + 2];
        const char *colon = strrchr(listen, ':');
        char *end;

        if (!colon || (size_t)(colon - listen) >= sizeof(host))
                return -EINVAL;
        long port = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || port < 0 || port > 65535)
                return -EINVAL;
        memcpy(host, listen, (size_t)(colon - listen));
        host[colon - listen] = '\0';

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

        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_ERROR_LOG | (addr.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
        struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, handle_request, &ctx,
                                                MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                                MHD_OPTION_CONNECTION_TIMEOUT, 120u,
                                                MHD_OPTION_END);
        if (!d) {
                r = -EADDRNOTAVAIL;
                fprintf(stderr, "d9ctl serve: cannot listen on %s (address in use?)\n", cfg->listen);
                goto out;
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        const char *colon = strrchr(cfg->listen, ':');
        printf("serving http://%.*s:%u/ from %s%s%s%s\n", (int)(colon - cfg->listen), cfg->listen,
               info ? info->port : 0, cfg->bucket ? "s3://" : "",
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
