#!/usr/bin/env bash
# Makes the seed corpus (from the dial9 fixture and our own encoder), then
# runs the decoder fuzzer on it for a bounded time.
# usage: test_fuzz.sh FUZZER SEED_GENERATOR FIXTURE SEED_DIR SECONDS
set -uo pipefail
fuzzer=$1 seed_gen=$2 fixture=$3 seeds=$4 secs=$5
[ -f "$fixture" ] || { echo "Bail out! dial9 fixture $fixture is missing (shared/ must sit beside the checkout)"; exit 1; }
"$seed_gen" "$fixture" "$seeds" "$seeds.stamp" >/dev/null || { echo "Bail out! making the seed corpus failed"; exit 1; }
[ -n "$(ls -A "$seeds")" ] || { echo "Bail out! seed corpus $seeds is empty"; exit 1; }
work=$(mktemp -d /tmp/d9fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
# New inputs go to $work; the seeds stay untouched. -timeout catches hangs,
# leak detection is on by default under ASan.
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$work/" "$work" "$seeds" >"$work/log" 2>&1
rc=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
if [ $rc -eq 0 ] && [ "${runs:-0}" -gt 0 ]; then
        echo "ok 1 - decoder fuzzed for ${secs}s: $runs inputs, no crash, leak or hang"
        echo "1..1"
        exit 0
fi
echo "not ok 1 - fuzzer exit $rc after ${runs:-0} inputs"
grep -E 'ERROR|SUMMARY|artifact|Test unit' "$work/log" | head -20 | sed 's/^/# /'
for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -f "$a" ] && { echo "# input: $(basename "$a"): $(od -An -tx1 -v "$a" | head -c 600 | tr -s ' \n' ' ')"; cp "$a" /tmp/; }
done
echo "1..1"
exit 1
