/* d9ctl serve: a loopback HTTP server that lists recorded trace segments,
 * hands them (decompressed, possibly several concatenated) to the browser and
 * serves the static viewer app. Public face of viewer/ for d9ctl. */
#pragma once

struct serve_config {
        const char *dir;        /* local trace root (folder tree of segments) */
        const char *bucket;     /* S3 bucket instead of dir (not available yet) */
        const char *prefix;     /* key prefix inside the bucket */
        const char *endpoint;   /* S3 endpoint URL */
        const char *listen;     /* "HOST:PORT"; port 0 picks a free one */
        const char *assets_dir; /* directory holding index.html & co. */
};

/* Directory of the viewer's static files: $D9_VIEWER_DIR if set; the source
 * tree's viewer/web when this d9ctl is the one in its meson build tree; else
 * the install path (DATADIR/d9d/viewer). */
const char *serve_default_assets_dir(void);

/* Runs the server until SIGINT/SIGTERM. Prints "serving
 * http://HOST:PORT/?token=T" on stdout once listening; every request needs
 * that token (viewer/serve_auth.c). Returns 0 or a negative errno; failures are
 * reported on stderr with context. */
int serve_run(const struct serve_config *cfg);
