#!/usr/bin/env bash
# uprobes-plan-time: how long building a probe plan takes and what it finds,
# per binary given (Tokio targets, third-party programs such as codex or
# turbo from npm). Usage: bench/uprobes-plan-time.sh PLAN_DUMP BINARY...
set -euo pipefail
plan_dump=${1:?usage: $0 PLAN_DUMP BINARY...}
shift
printf '%-40s %10s %8s %8s %9s %8s  %s\n' binary size_MB vtables polls plan_ms wall_ms shape
for bin in "$@"; do
        t0=$(date +%s%N)
        json=$("$plan_dump" --json --exe "$bin") || { printf '%-40s (no plan)\n' "$(basename "$bin")"; continue; }
        t1=$(date +%s%N)
        printf '%s' "$json" | python3 -c '
import json, os, sys
b, wall, d = sys.argv[1], sys.argv[2], json.load(sys.stdin)
polls = sum(1 for p in d["points"] if p["kind"] == "poll")
name, size = os.path.basename(b)[:40], os.path.getsize(b) / 1e6
vt, ms, tv, shape = d["discovery"]["vtables"], d["elapsed_ms"], d["tokio_version"], d["shape"]
print(f"{name:<40} {size:>10.1f} {vt:>8} {polls:>8} {ms:>9.1f} {wall:>8}  tokio {tv}, {shape}")
' "$bin" "$(( (t1 - t0) / 1000000 ))"
done
