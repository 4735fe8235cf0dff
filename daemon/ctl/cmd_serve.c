/* d9ctl serve: browse recorded traces in the web viewer (see viewer/serve.h). */
#include <getopt.h>
#include <stdio.h>

#include "d9ctl.h"
#include "viewer/serve.h"

static void serve_usage(FILE *out)
{
        fprintf(out, "usage: d9ctl serve [--dir DIR | --bucket B [--prefix P] [--endpoint URL]] "
                     "[--listen 127.0.0.1:3000]\n");
}

int d9ctl_cmd_serve(int argc, char **argv)
{
        static const struct option opts[] = {
                { "dir", required_argument, NULL, 'd' },
                { "bucket", required_argument, NULL, 'b' },
                { "prefix", required_argument, NULL, 'p' },
                { "endpoint", required_argument, NULL, 'e' },
                { "listen", required_argument, NULL, 'l' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        struct serve_config cfg = {
                .listen = "127.0.0.1:3000",
                .assets_dir = serve_default_assets_dir(),
        };
        int opt;

        while ((opt = getopt_long(argc, argv, "d:b:p:e:l:h", opts, NULL)) != -1) {
                switch (opt) {
                case 'd': cfg.dir = optarg; break;
                case 'b': cfg.bucket = optarg; break;
                case 'p': cfg.prefix = optarg; break;
                case 'e': cfg.endpoint = optarg; break;
                case 'l': cfg.listen = optarg; break;
                case 'h': serve_usage(stdout); return 0;
                default: serve_usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "d9ctl serve: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }
        if (!!cfg.dir == !!cfg.bucket) {
                fprintf(stderr, "d9ctl serve: give exactly one of --dir DIR or --bucket B\n");
                return 2;
        }
        if ((cfg.prefix || cfg.endpoint) && !cfg.bucket) {
                fprintf(stderr, "d9ctl serve: --prefix/--endpoint only apply with --bucket\n");
                return 2;
        }
        return serve_run(&cfg) < 0 ? 1 : 0;
}
