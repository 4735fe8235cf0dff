#!/usr/bin/env bash
# d9ctl dump on dial9's fixture and on damaged copies of it: summary counts,
# one valid JSON object per event, one-line errors with offsets.
# usage: test_dump.sh D9CTL FIXTURE
set -uo pipefail
d9ctl=$1 fixture=$2
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi; }
[ -f "$fixture" ] || { echo "Bail out! dial9 fixture missing: $fixture (shared/ must sit beside the source tree)"; exit 1; }
tmp=$(mktemp -d /tmp/d9dump-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$d9ctl" dump --summary "$fixture" >"$tmp/summary" 2>"$tmp/err"; rc=$?
ok $rc "dump --summary exits 0 on the fixture"
grep -q '14 streams, .* 210639 events' "$tmp/summary"; ok $? "summary reports 14 streams and 210639 events"
grep -Eq '^ +36801  PollStartEvent$' "$tmp/summary"; ok $? "summary counts 36801 PollStartEvent"
grep -Eq '^ +992  SymbolTableEntry$' "$tmp/summary"; ok $? "summary counts 992 SymbolTableEntry"
grep -q 'CpuSampleEvent { worker_id: Varint, tid: U32, source: U8, thread_name: Optional PooledString, callchain: PooledStackFrames, cpu: Optional Varint }' "$tmp/summary"
ok $? "summary lists the CpuSampleEvent schema with field types"

"$d9ctl" dump --json "$fixture" >"$tmp/json"; rc=$?
ok $rc "dump --json exits 0"
python3 - "$tmp/json" <<'PY'
import json, sys
n = 0
polls = 0
for line in open(sys.argv[1]):
    ev = json.loads(line)
    n += 1
    if ev["event"] == "PollStartEvent":
        polls += 1
        assert set(ev["fields"]) == {"worker_id", "local_queue", "task_id", "spawn_loc"}
        assert isinstance(ev["fields"]["spawn_loc"], str) and ":" in ev["fields"]["spawn_loc"]
    if ev["event"] == "SegmentMetadataEvent":
        assert ev["fields"]["entries"]["service"] == "metrics-service"
sys.exit(0 if n == 210639 and polls == 36801 else 1)
PY
ok $? "--json prints 210639 parseable objects with named, pool-resolved fields"

"$d9ctl" dump "$fixture" | sed -n 2p | grep -q '^[0-9]* ClockSyncEvent realtime_ns=1778867710078081994$'
ok $? "text listing starts with the ClockSyncEvent"

gzip -dc "$fixture" >"$tmp/raw.bin"
cp "$tmp/raw.bin" "$tmp/corrupt.bin"
printf '\x07' | dd of="$tmp/corrupt.bin" bs=1 seek=5 conv=notrunc 2>/dev/null
"$d9ctl" dump --summary "$tmp/corrupt.bin" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
        grep -q "^d9ctl: $tmp/corrupt.bin: corrupt trace at offset 5: unknown frame tag" "$tmp/err"
ok $? "a corrupt frame tag gives one line with offset 5 and a non-zero exit ($(cat "$tmp/err"))"

head -c 1000000 "$tmp/raw.bin" >"$tmp/torn.bin"
"$d9ctl" dump --summary "$tmp/torn.bin" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q 'torn tail at offset' "$tmp/err"
ok $? "a torn tail is tolerated with a warning by default"
"$d9ctl" dump --strict --summary "$tmp/torn.bin" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'corrupt trace at offset [0-9]*: truncated frame' "$tmp/err"
ok $? "--strict reports the torn tail as an error with its offset"

zstd -q -3 "$tmp/raw.bin" -o "$tmp/raw.bin.zst"
"$d9ctl" dump --summary "$tmp/raw.bin.zst" | tail -n +2 >"$tmp/zsum"
tail -n +2 "$tmp/summary" | diff -q - "$tmp/zsum" >/dev/null
ok $? "a zstd copy summarises identically"

"$d9ctl" dump "$tmp/missing.bin" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && [ "$(wc -l <"$tmp/err")" = 1 ]
ok $? "a missing file gives one error line and a non-zero exit"
"$d9ctl" dump >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ]; ok $? "no file argument is a usage error"

echo "1..$n"
exit $failed
