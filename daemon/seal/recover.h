/* recover: `.active` segments left behind by a crash are trimmed to their
 * last whole frame and queued for sealing when d9d starts. */
#pragma once

struct sealer;

/* Returns the number of segments queued, or a negative errno. */
int seal_recover_active_segments(const char *traces_dir, struct sealer *sealer, int compression);
/* Trim one file to its longest valid prefix; returns bytes cut or -errno. */
long long seal_recover_trim(const char *path);
