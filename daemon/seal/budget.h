/* budget: keep sealed segments under the configured total size by deleting
 * the oldest ones first. `.active` files are never touched. */
#pragma once

#include <stdint.h>

struct budget_result {
        uint64_t total_bytes;   /* sealed bytes before eviction */
        uint64_t evicted, evicted_bytes;
};

int seal_budget_enforce(const char *traces_dir, uint64_t budget_bytes, struct budget_result *res);
