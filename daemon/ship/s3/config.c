/* S3 settings from d9d.conf, the environment and ~/.aws/credentials.
 * Precedence for credentials: d9d.conf, then the environment, then the shared
 * credentials file; a key pair is never mixed from two sources. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/ship/s3/s3.h"

void s3_config_init(struct s3_config *cfg)
{
        *cfg = (struct s3_config){
                .path_style = -1,
                .multipart_threshold = S3_DEFAULT_MULTIPART_THRESHOLD,
                .part_size = S3_DEFAULT_PART_SIZE,
                .timeout_s = 300,
        };
}

static void free_secret(char **s)
{
        if (*s)
                explicit_bzero(*s, strlen(*s));
        free(*s);
        *s = NULL;
}

void s3_config_free(struct s3_config *cfg)
{
        free(cfg->bucket);
        free(cfg->prefix);
        free(cfg->region);
        free(cfg->endpoint);
        free(cfg->access_key);
        free_secret(&cfg->secret_key);
        free_secret(&cfg->session_token);
        free(cfg->profile);
        free(cfg->instance);
        s3_config_init(cfg);
}

static int set_str(char **dst, const char *value)
{
        char *copy = strdup(value);
        if (!copy)
                return -ENOMEM;
        free_secret(dst);
        *dst = copy;
        return 0;
}

static int parse_size(const char *v, uint64_t *out)
{
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        int shift = 0;
        if (end == v)
                return -EINVAL;
        switch (*end) {
        case 'K': case 'k': shift = 10; end++; break;
        case 'M': case 'm': shift = 20; end++; break;
        case 'G': case 'g': shift = 30; end++; break;
        }
        if (*end)
                return -EINVAL;
        *out = (uint64_t)n << shift;
        return 0;
}

static int parse_bool(const char *v, int *out)
{
        if (!strcasecmp(v, "yes") || !strcasecmp(v, "true") || !strcmp(v, "1"))
                *out = 1;
        else if (!strcasecmp(v, "no") || !strcasecmp(v, "false") || !strcmp(v, "0"))
                *out = 0;
        else
                return -EINVAL;
        return 0;
}

static int set_number(struct s3_config *cfg, const char *key, const char *value, const char **why)
{
        uint64_t n;
        if (!strcmp(key, "s3_timeout")) {
                char *end;
                long s = strtol(value, &end, 10);
                if (end == value || (*end && strcmp(end, "s")) || s <= 0)
                        return *why = "s3_timeout must be a positive number of seconds", -EINVAL;
                cfg->timeout_s = s;
                return 0;
        }
        if (parse_size(value, &n) < 0)
                return *why = "expected a size such as 64M", -EINVAL;
        if (!strcmp(key, "s3_max_upload_rate")) {
                cfg->max_upload_rate = n;
        } else if (!strcmp(key, "s3_part_size")) {
                if (n < S3_MIN_PART_SIZE)
                        return *why = "s3_part_size must be at least 5M (S3's minimum part size)", -EINVAL;
                cfg->part_size = n;
        } else {
                cfg->multipart_threshold = n;
        }
        return 0;
}

int s3_config_set(struct s3_config *cfg, const char *key, const char *value, const char **why)
{
        static const struct {
                const char *key;
                size_t offset;
        } strings[] = {
                { "s3_bucket", offsetof(struct s3_config, bucket) },
                { "s3_prefix", offsetof(struct s3_config, prefix) },
                { "s3_region", offsetof(struct s3_config, region) },
                { "s3_endpoint", offsetof(struct s3_config, endpoint) },
                { "s3_access_key_id", offsetof(struct s3_config, access_key) },
                { "s3_secret_access_key", offsetof(struct s3_config, secret_key) },
                { "s3_session_token", offsetof(struct s3_config, session_token) },
                { "s3_profile", offsetof(struct s3_config, profile) },
                { "s3_instance", offsetof(struct s3_config, instance) },
        };
        for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
                if (strcmp(key, strings[i].key))
                        continue;
                char **dst = (char **)((char *)cfg + strings[i].offset);
                if (!strcmp(key, "s3_prefix")) { /* keys join with '/' themselves */
                        char *p;
                        int err = set_str(dst, value);
                        for (p = *dst ? *dst + strlen(*dst) : NULL; p && p > *dst && p[-1] == '/';)
                                *--p = 0;
                        return err;
                }
                return set_str(dst, value);
        }
        if (!strcmp(key, "s3_path_style"))
                return parse_bool(value, &cfg->path_style) < 0 ? (*why = "expected yes or no", -EINVAL) : 0;
        if (!strcmp(key, "s3_multipart_threshold") || !strcmp(key, "s3_part_size") ||
            !strcmp(key, "s3_timeout") || !strcmp(key, "s3_max_upload_rate"))
                return set_number(cfg, key, value, why);
        return -ENOENT;
}

static void trim(char *s)
{
        char *start = s + strspn(s, " \t");
        size_t len = strlen(start);
        while (len && strchr(" \t\r\n", start[len - 1]))
                len--;
        memmove(s, start, len);
        s[len] = 0;
}

/* Reads aws_access_key_id / aws_secret_access_key / aws_session_token of one
 * [profile] from an INI file. */
static int read_profile(struct s3_config *cfg, const char *path, const char *profile)
{
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        char line[1024], section[256] = "";
        int err = 0;
        while (!err && fgets(line, sizeof line, f)) {
                trim(line);
                if (line[0] == '[') {
                        snprintf(section, sizeof section, "%.*s", (int)strcspn(line + 1, "]"), line + 1);
                        trim(section);
                        continue;
                }
                char *eq = strchr(line, '=');
                if (!eq || strcmp(section, profile) || line[0] == '#' || line[0] == ';')
                        continue;
                *eq = 0;
                char *name = line, *value = eq + 1;
                trim(name);
                trim(value);
                if (!strcmp(name, "aws_access_key_id"))
                        err = set_str(&cfg->access_key, value);
                else if (!strcmp(name, "aws_secret_access_key"))
                        err = set_str(&cfg->secret_key, value);
                else if (!strcmp(name, "aws_session_token"))
                        err = set_str(&cfg->session_token, value);
        }
        explicit_bzero(line, sizeof line);
        fclose(f);
        return err;
}

static int credentials_from_file(struct s3_config *cfg)
{
        const char *path = getenv("AWS_SHARED_CREDENTIALS_FILE");
        const char *profile = cfg->profile ? cfg->profile : getenv("AWS_PROFILE");
        char buf[4096];
        if (!path) {
                const char *home = getenv("HOME");
                snprintf(buf, sizeof buf, "%s/.aws/credentials", home ? home : "/root");
                path = buf;
        }
        return read_profile(cfg, path, profile && *profile ? profile : "default");
}

int s3_config_resolve(struct s3_config *cfg, const char **why)
{
        const char *env_region = getenv("AWS_REGION");
        if (!env_region)
                env_region = getenv("AWS_DEFAULT_REGION");
        if (!cfg->bucket || !*cfg->bucket)
                return *why = "s3_bucket is not set", -EINVAL;
        if (!cfg->region && set_str(&cfg->region, env_region ? env_region : "us-east-1") < 0)
                return -ENOMEM;
        if (cfg->access_key && cfg->secret_key)
                return 0;
        const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
        const char *token = getenv("AWS_SESSION_TOKEN");
        if (id && *id && secret && *secret) {
                if (set_str(&cfg->access_key, id) < 0 || set_str(&cfg->secret_key, secret) < 0 ||
                    (token && *token && set_str(&cfg->session_token, token) < 0))
                        return -ENOMEM;
                return 0;
        }
        free_secret(&cfg->access_key);
        free_secret(&cfg->secret_key);
        free_secret(&cfg->session_token);
        credentials_from_file(cfg);
        if (cfg->access_key && cfg->secret_key)
                return 0;
        *why = "no S3 credentials: set s3_access_key_id and s3_secret_access_key, "
               "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials";
        return -ENOKEY;
}
