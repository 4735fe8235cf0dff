/* dial9 key layout and boot ids for known inputs, and where S3 credentials
 * come from (d9d.conf, environment, shared credentials file + profile). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/ship/s3/s3.h"
#include "../tap.h"

static void key_layout(void)
{
        char key[256];
        int n = s3_dial9_key(key, sizeof key, NULL, 1767322800, "checkout", "ip-10-0-0-1", "qzab-812", 0, ".bin.gz");
        ok(n > 0 && !strcmp(key, "2026-01-02/0300/checkout/ip-10-0-0-1/qzab-812/1767322800-0.bin.gz"),
           "no prefix: %s", key);
        s3_dial9_key(key, sizeof key, "traces/prod", 1767398399, "svc", "us-east-1/i-0abc", "abcd-1", 17, ".bin.zst");
        ok(!strcmp(key, "traces/prod/2026-01-02/2359/svc/us-east-1/i-0abc/abcd-1/1767398399-17.bin.zst"),
           "prefix, last minute of the day, instance with '/', zst: %s", key);
        s3_dial9_key(key, sizeof key, "", 0, "s", "h", "b", 3, ".bin");
        ok(!strcmp(key, "1970-01-01/0000/s/h/b/0-3.bin"), "epoch 0 and empty prefix: %s", key);
        s3_dial9_key(key, sizeof key, NULL, 951782400, "s", "h", "b", 1, ".bin.gz");
        ok(!strcmp(key, "2000-02-29/0000/s/h/b/951782400-1.bin.gz"), "leap day in UTC: %s", key);
        ok(s3_dial9_key(key, sizeof key, NULL, 1, "", "h", "b", 1, ".bin") == -EINVAL, "empty service is -EINVAL");
        ok(s3_dial9_key(key, 20, NULL, 1, "s", "h", "b", 1, ".bin") == -ENAMETOOLONG, "short buffer is -ENAMETOOLONG");
}

static void boot_ids(void)
{
        char id[32];
        s3_dial9_boot_id(id, 0, 1);
        ok(!strcmp(id, "aaaa-1"), "seed 0: %s", id);
        s3_dial9_boot_id(id, 27 + 26 * 26 * 25, 4242);
        ok(!strcmp(id, "bbza-4242"), "four lowercase letters, least significant first, then -pid: %s", id);
}

static void clear_env(void)
{
        const char *vars[] = { "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                               "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_REGION", "AWS_DEFAULT_REGION" };
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
                unsetenv(vars[i]);
}

static void credentials(void)
{
        struct s3_config cfg;
        const char *why = NULL;
        char path[] = "/tmp/d9-s3-creds.XXXXXX";
        int fd = mkstemp(path);
        const char *ini = "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n"
                          "\n[ship]\naws_access_key_id=SHIPKEY\naws_secret_access_key=shipsecret\n"
                          "aws_session_token = tok\n";
        if (fd < 0 || write(fd, ini, strlen(ini)) != (ssize_t)strlen(ini))
                bail("temp file");
        close(fd);
        clear_env();
        setenv("HOME", "/nonexistent", 1);

        s3_config_init(&cfg);
        ok(s3_config_resolve(&cfg, &why) == -EINVAL && why, "no bucket: %s", why);
        s3_config_set(&cfg, "s3_bucket", "b", &why);
        ok(s3_config_resolve(&cfg, &why) == -ENOKEY && strstr(why, "credentials"), "no credentials anywhere: %s", why);
        ok(cfg.region && !strcmp(cfg.region, "us-east-1"), "region defaults to us-east-1");
        s3_config_free(&cfg);

        setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
        s3_config_init(&cfg);
        s3_config_set(&cfg, "s3_bucket", "b", &why);
        ok(s3_config_resolve(&cfg, &why) == 0 && !strcmp(cfg.access_key, "DEFKEY") &&
           !strcmp(cfg.secret_key, "defsecret"), "shared credentials file, default profile");
        s3_config_free(&cfg);

        setenv("AWS_PROFILE", "ship", 1);
        setenv("AWS_REGION", "eu-west-3", 1);
        s3_config_init(&cfg);
        s3_config_set(&cfg, "s3_bucket", "b", &why);
        ok(s3_config_resolve(&cfg, &why) == 0 && !strcmp(cfg.access_key, "SHIPKEY") &&
           !strcmp(cfg.session_token, "tok") && !strcmp(cfg.region, "eu-west-3"),
           "AWS_PROFILE picks [ship] with its session token; AWS_REGION applies");
        s3_config_free(&cfg);

        setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
        setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
        s3_config_init(&cfg);
        s3_config_set(&cfg, "s3_bucket", "b", &why);
        ok(s3_config_resolve(&cfg, &why) == 0 && !strcmp(cfg.access_key, "ENVKEY") && !cfg.session_token,
           "environment beats the shared file, and no token is mixed in from it");
        s3_config_free(&cfg);

        s3_config_init(&cfg);
        s3_config_set(&cfg, "s3_bucket", "b", &why);
        s3_config_set(&cfg, "s3_access_key_id", "CONFKEY", &why);
        s3_config_set(&cfg, "s3_secret_access_key", "confsecret", &why);
        ok(s3_config_resolve(&cfg, &why) == 0 && !strcmp(cfg.access_key, "CONFKEY"),
           "keys in d9d.conf beat the environment");
        ok(s3_config_set(&cfg, "s3_path_style", "maybe", &why) == -EINVAL, "bad boolean rejected: %s", why);
        ok(s3_config_set(&cfg, "s3_multipart_threshold", "8M", &why) == 0 &&
           cfg.multipart_threshold == 8u << 20, "size with M suffix");
        s3_config_free(&cfg);
        unlink(path);
}

int main(void)
{
        key_layout();
        boot_ids();
        credentials();
        return tap_done();
}
