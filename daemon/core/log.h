/* d9d logging: one line per event of note, to stderr (journald adds the time). */
#pragma once

#include <stdarg.h>

void d9_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_info(...) d9_log("info", __VA_ARGS__)
#define log_warn(...) d9_log("warning", __VA_ARGS__)
#define log_error(...) d9_log("error", __VA_ARGS__)
