#!/usr/bin/env bash
# `systemctl start d9d` for real: boots ROOT (a fresh Debian 12 root in which
# scripts/test has built d9d and its Tokio targets) with systemd as PID 1
# under systemd-nspawn, `meson install`s d9d into it, and drives the installed
# unit the way the docs tell a user to: systemctl start, d9ctl as a member of
# group d9d (attach, record, list), a d9d.conf rule attach = unit:NAME.service
# following a Tokio service through a restart, systemctl reload d9d adding
# a rule, the watchdog restarting a
# wedged d9d, and systemctl stop sealing the open segment. TAP on stdout.
#
#   tests/systemd/boot_in_nspawn.sh ROOT
#
# Why nspawn: these machines have no systemd as PID 1. nspawn gives the root
# its own PID 1 (systemd) and pid namespace on the real kernel; d9d needs
# BPF and perf_event_open in it, hence --capability=all and those two system
# calls added to nspawn's filter (the d9d unit then applies its own,
# narrower sandbox inside).
set -uo pipefail
# (pipelines into grep read all of their input: grep -q would end them early
# and, with pipefail, turn a match into a failure through SIGPIPE)
root=$(realpath "$1")
machine=d9ci-$$
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && sed 's/^/# /' <<<"$2"; }
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }
bail() { echo "Bail out! $*"; exit 1; }

target=/work/d9d/build/tests/targets/d9-target-1.43-release
[ -x "$root$target" ] || bail "$target missing in $root (run scripts/test in the root first)"
command -v systemd-nspawn >/dev/null || bail "systemd-nspawn missing (Debian package systemd-container)"

# Install into the root's /usr/local, as docs/service.md tells a user to; a
# drop-in shortens the watchdog so that its restart is seen within seconds.
chroot "$root" meson install -C /work/d9d/build --no-rebuild --quiet >/tmp/d9-nspawn-install.log 2>&1 ||
        bail "meson install in the root failed: $(tail -3 /tmp/d9-nspawn-install.log)"
mkdir -p "$root/etc/systemd/system/d9d.service.d"
printf '[Service]\nWatchdogSec=4s\n' >"$root/etc/systemd/system/d9d.service.d/ci-watchdog.conf"
cp "$root$target" "$root/usr/local/bin/d9-demo-target"
# rsyslog (pulled in by swift for the S3 tests) spins on /proc/kmsg inside
# nspawn; journald is the log this test reads.
ln -sf /dev/null "$root/etc/systemd/system/rsyslog.service"
# A Tokio service of its own for the unit: rule: d9d attaches to whatever
# systemd starts as d9-demo.service, found by its cgroup.
for u in d9-demo d9-demo2; do
        printf '[Unit]\nDescription=d9 demo Tokio service\n[Service]\nExecStart=/usr/local/bin/d9-demo-target mixed --duration 600\n' \
                >"$root/etc/systemd/system/$u.service"
done
conf=$root/usr/local/etc/d9d/d9d.conf
grep -v '^attach = unit:d9-demo' "$conf" >"$conf.new" && mv "$conf.new" "$conf"
echo 'attach = unit:d9-demo.service' >>"$conf"

log=$(mktemp)
systemd-nspawn -q -D "$root" --boot --register=no --keep-unit --machine="$machine" \
        --capability=all --system-call-filter='bpf perf_event_open' --console=passive >"$log" 2>&1 &
nspawn=$!
cleanup() {
        [ -n "${leader:-}" ] && nsenter -t "$leader" -a systemctl poweroff >/dev/null 2>&1
        for _ in $(seq 300); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
        # Killing the container's PID 1 ends its whole pid namespace; killing
        # only nspawn would leave that systemd running on the host.
        [ -n "${leader:-}" ] && kill -9 "$leader" 2>/dev/null
        kill -9 "$nspawn" 2>/dev/null
        wait "$nspawn" 2>/dev/null
        rm -f "$log"
}
trap cleanup EXIT

leader=
for _ in $(seq 100); do
        leader=$(pgrep -P "$nspawn" -x systemd || true)
        [ -n "$leader" ] && break
        sleep 0.1
done
[ -n "$leader" ] || bail "systemd did not start in the container: $(cat "$log")"
ct() { nsenter -t "$leader" -a "$@"; }
state=
for _ in $(seq 120); do
        state=$(ct systemctl is-system-running 2>/dev/null)
        case $state in running|degraded) break ;; esac
        sleep 0.5
done
check "the root boots with systemd as PID 1 (is-system-running: $state)" \
        '[ "$state" = running ] || [ "$state" = degraded ]' "$(ct systemctl --failed --no-pager 2>&1)"
check "sysusers created group d9d from the installed sysusers.d" 'ct getent group d9d >/dev/null'
ct useradd -m -G d9d sre 2>/dev/null
as_sre() { ct runuser -u sre -- "$@"; }
show() { ct systemctl show d9d -p "$1" --value; }

ct systemctl start d9d
check "systemctl start d9d: active once d9d said READY=1 (Type=notify)" \
        '[ "$(show ActiveState)" = active ] && [ "$(show Type)" = notify ]' "$(ct journalctl -u d9d --no-pager | tail -5)"
check "d9d's STATUS= reached systemd" '[ -n "$(show StatusText)" ]'
ping1=$(show WatchdogTimestampMonotonic); sleep 3; ping2=$(show WatchdogTimestampMonotonic)
check "systemd sees watchdog pings (WatchdogSec=$(show WatchdogUSec), last ping moved $ping1 -> $ping2)" \
        '[ "$ping2" -gt "$ping1" ]'
check "d9ctl list works for a member of group d9d" 'as_sre d9ctl list >/dev/null'
check "man d9ctl finds the installed page" 'ct man -P cat d9ctl 2>/dev/null | grep attach >/dev/null'

# attach = unit:d9-demo.service: the unit's process, and the new one of a restart.
# $1: a pid; prints its line of d9ctl list once it is recording under the rule.
rule_line() {
        local l
        for _ in $(seq 50); do
                l=$(ct d9ctl list 2>/dev/null | awk -v p="$1" '$1 == p && $2 == "recording" && / unit:d9-demo\.service /')
                [ -n "$l" ] && { echo "$l"; return 0; }
                sleep 0.1
        done
        return 1
}
ct systemctl start d9-demo
unit1=$(ct systemctl show d9-demo -p MainPID --value)
line=$(rule_line "$unit1")
check "attach = unit:d9-demo.service attaches the unit's pid $unit1 and d9ctl list names the rule" \
        '[ "$unit1" != 0 ] && [ -n "$line" ]' "$(ct d9ctl list 2>&1; ct journalctl -u d9d --no-pager | grep auto-attach | tail -4)"
ct systemctl restart d9-demo
unit2=$(ct systemctl show d9-demo -p MainPID --value)
line=$(rule_line "$unit2")
took=$(ct journalctl -u d9d --no-pager | sed -n "s/.*unit:d9-demo.service attached pid $unit2 \([0-9]*\) ms after its exec.*/\1/p" | tail -1)
check "systemctl restart d9-demo: the new pid $unit2 is attached ${took:-?} ms after its exec, under the rule" \
        '[ "$unit2" != 0 ] && [ "$unit2" != "$unit1" ] && [ -n "$line" ] && [ -n "$took" ]' \
        "$(ct d9ctl list 2>&1; ct journalctl -u d9d --no-pager | grep auto-attach | tail -4)"
counts=$(ct d9ctl list 2>/dev/null | grep -F '  unit:d9-demo.service:')
check "d9ctl list counts the rule's two attaches ($counts)" 'grep -F ": 2 matched, 2 attached," <<<"$counts" >/dev/null' \
        "$(ct d9ctl list 2>&1)"
# systemctl reload d9d (ExecReload, SIGHUP): a rule added to the file applies
# to a unit already running, without a restart of d9d.
ct systemctl start d9-demo2
demo2=$(ct systemctl show d9-demo2 -p MainPID --value)
before=$(show MainPID)
echo 'attach = unit:d9-demo2.service' >>"$conf"
ct systemctl reload d9d
l2=
for _ in $(seq 50); do
        l2=$(ct d9ctl list 2>/dev/null | awk -v p="$demo2" '$1 == p && $2 == "recording" && / unit:d9-demo2\.service /')
        [ -n "$l2" ] && break
        sleep 0.1
done
check "systemctl reload d9d: the added rule unit:d9-demo2.service attaches the running pid $demo2 (d9d still pid $before)" \
        '[ -n "$l2" ] && [ "$(show MainPID)" = "$before" ] && [ -n "$(rule_line "$unit2")" ]' \
        "$(ct d9ctl list 2>&1; ct journalctl -u d9d --no-pager | grep reload | tail -4)"
ct systemctl stop d9-demo2

as_sre bash -c 'd9-demo-target mixed --duration 25 >/dev/null 2>&1 &'
pid=
for _ in $(seq 50); do pid=$(ct pgrep -u sre -x d9-demo-target || true); [ -n "$pid" ] && break; sleep 0.1; done
[ -n "$pid" ] || bail "the demo target did not start in the container"
# --probes all: the default set has no poll probes, and polls are what this checks.
rec=$(as_sre d9ctl record --pid "$pid" --probes all --duration 4s 2>&1)
seg=$(grep -m1 '\.bin' <<<"$rec")
check "d9ctl record --pid as sre (a member of group d9d) seals a segment" '[ -n "$seg" ] && ct test -s "$seg"' "$rec"
polls=$(as_sre d9ctl dump --summary "$seg" 2>/dev/null | awk '$2 == "PollStartEvent" { print $1; exit }')
check "the recorded segment holds the target's polls (${polls:-none})" '[ "${polls:-0}" -gt 100 ]' \
        "$(as_sre d9ctl dump --summary "$seg" 2>&1 | head -20)"

# A wedged d9d (stopped main loop) is killed and restarted by the watchdog.
old=$(show MainPID)
ct kill -STOP "$old"
for _ in $(seq 100); do
        new=$(show MainPID)
        [ "$new" != "$old" ] && [ "$new" != 0 ] && [ "$(show ActiveState)" = active ] && break
        sleep 0.2
done
check "the watchdog restarts a wedged d9d (pid $old -> $new, NRestarts=$(show NRestarts))" \
        '[ "$new" != "$old" ] && [ "$(show NRestarts)" -ge 1 ]' "$(ct journalctl -u d9d --no-pager | tail -8)"
# journald may take a moment to write what systemd logged.
wd="d9d.service: Failed with result 'watchdog'"
for _ in $(seq 25); do ct journalctl --no-pager | grep -F "$wd" >/dev/null && break; sleep 0.2; done
check "systemd logged that the watchdog ended d9d ($wd)" 'ct journalctl --no-pager | grep -F "$wd" >/dev/null' \
        "$(ct journalctl --no-pager | grep -E "systemd\[1\].*d9d" | tail -6)"

line=$(rule_line "$unit2")
check "the restarted d9d attaches the still running unit (pid $unit2) by the rule at its start" '[ -n "$line" ]' \
        "$(ct d9ctl list 2>&1)"

att=$(as_sre d9ctl attach --pid "$pid" 2>&1); rc=$?
check "d9ctl attach --pid as sre after the restart" '[ $rc = 0 ]' "$att"
sleep 2
dir=$(as_sre d9ctl status --pid "$pid" 2>/dev/null | awk '$1 == "dir" { print $2; exit }')
main=$(show MainPID)
ct systemctl stop d9d
check "systemctl stop d9d exits cleanly (Result=$(show Result), status $(show ExecMainStatus))" \
        '[ "$(show Result)" = success ] && [ "$(show ExecMainStatus)" = 0 ] && [ "$(show ActiveState)" = inactive ]' \
        "$(ct journalctl -u d9d --no-pager | tail -8)"
check "stopping sealed the attached session's segment in $dir" \
        '[ -n "$dir" ] && ct journalctl _PID="$main" --no-pager | grep "sealed $dir/" >/dev/null' \
        "$(ct journalctl _PID="$main" --no-pager | tail -5)"
echo "1..$n"
[ "$failed" = 0 ]
