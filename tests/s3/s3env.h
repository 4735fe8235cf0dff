/* Client configuration from the variables tests/s3/swift-harness exports. */
#pragma once

#include <stdlib.h>
#include <string.h>

#include "daemon/ship/s3/s3.h"
#include "../tap.h"

static inline void s3env_config(struct s3_config *cfg, const char *bucket)
{
        const char *need[] = { "D9_S3_ENDPOINT", "D9_S3_ACCESS_KEY", "D9_S3_SECRET_KEY" };
        for (size_t i = 0; i < 3; i++)
                if (!getenv(need[i]))
                        bail("%s is not set: run this test under tests/s3/swift-harness run", need[i]);
        s3_config_init(cfg);
        cfg->bucket = strdup(bucket);
        cfg->endpoint = strdup(getenv("D9_S3_ENDPOINT"));
        cfg->region = strdup(getenv("D9_S3_REGION") ? getenv("D9_S3_REGION") : "us-east-1");
        cfg->access_key = strdup(getenv("D9_S3_ACCESS_KEY"));
        cfg->secret_key = strdup(getenv("D9_S3_SECRET_KEY"));
        cfg->timeout_s = 30;
}

static inline uint8_t *read_file(const char *path, size_t *len)
{
        FILE *f = fopen(path, "rb");
        *len = 0;
        if (!f)
                return NULL;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
        }
        fclose(f);
        *len = (size_t)n;
        return buf;
}
