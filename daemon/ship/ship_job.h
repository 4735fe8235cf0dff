/* One pending upload, persisted as <state_dir>/<hash>.job (internal to the shipper). */
#pragma once

#include "daemon/ship/ship.h"

#define SHIP_JOB_MAX_META 6

struct ship_job {
        char *path;             /* the sealed segment */
        char *job_path;         /* its .job file */
        char *key;
        char *content_type;
        struct s3_meta meta[SHIP_JOB_MAX_META];
        size_t n_meta;
        unsigned attempts;
};

/* Computes the key and metadata and writes the .job file (fsync'd). */
int ship_job_create(const struct ship_config *cfg, const char *instance, const char *sealed_path,
                    const struct segment_meta *m, struct ship_job **out);
int ship_job_load(const char *job_path, struct ship_job **out);
/* Removes the .job file: the upload is done, or the segment is gone. */
int ship_job_forget(const struct ship_job *job);
void ship_job_free(struct ship_job *job);
