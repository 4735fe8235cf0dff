/* Where d9ctl serve finds the viewer's static files. */
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "viewer/serve.h"

/* True when the running binary sits in the build tree's d9ctl directory: a
 * d9ctl run straight from `meson compile` serves the source tree's viewer,
 * so the demo's printed `d9ctl serve` works before any install, while an
 * installed copy (anywhere else) never looks into a build tree. */
static bool running_from_build_tree(void)
{
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
                return false;
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (!slash)
                return false;
        *slash = '\0';
        /* The build dir meson was given may contain symlinks; /proc/self/exe
         * never does. */
        char build[PATH_MAX];
        return realpath(D9_CTL_BUILD_DIR, build) && strcmp(exe, build) == 0;
}

const char *serve_default_assets_dir(void)
{
        const char *env = getenv("D9_VIEWER_DIR");
        if (env && *env)
                return env;
        if (running_from_build_tree())
                return D9_VIEWER_SOURCE_DIR;
        return D9_VIEWER_INSTALL_DIR;
}
