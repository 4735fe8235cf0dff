#!/usr/bin/env bash
# d9ctl serve finds the viewer without D9_VIEWER_DIR: from the build tree (the
# source tree's viewer/web) and from an install (DATADIR/d9d/viewer); and
# `meson install --destdir` lays out binaries, man pages, units and viewer
# where a Debian user expects them.
#   serve_finds_viewer.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
unset D9_VIEWER_DIR
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; [ $# -gt 1 ] && sed 's/^/# /' <<<"$2"; }
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }

# serve_index CTL OUTFILE: starts CTL serve on a free port, fetches /, stops it.
serve_index() {
        local ctl=$1 out=$2 url=""
        "$ctl" serve --dir "$tmp" --listen 127.0.0.1:0 >"$tmp/serve.out" 2>"$tmp/serve.err" &
        local pid=$!
        for _ in $(seq 50); do
                url=$(sed -n 's/^serving \(http:[^ ]*\).*/\1/p' "$tmp/serve.out")
                [ -n "$url" ] && break
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
        done
        [ -n "$url" ] && curl -sf "$url" >"$out"
        local rc=$?
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
        return $rc
}

serve_index "$build/daemon/d9ctl" "$tmp/index.html"
check "build-tree d9ctl serves the source tree's viewer with D9_VIEWER_DIR unset" \
        'cmp -s "$tmp/index.html" "$src/viewer/web/index.html"' "$(cat "$tmp/serve.err")"

# A copy outside the build tree must not look into it: it wants the install
# path, and says so (with the variable that overrides it) when that is absent.
cp "$build/daemon/d9ctl" "$tmp/d9ctl-copy"
installed=$(grep -ao '/[^"[:cntrl:]]*/share/d9d/viewer' "$tmp/d9ctl-copy" | sed -n 1p)
if [ -d "$installed" ]; then
        serve_index "$tmp/d9ctl-copy" "$tmp/index2.html"
        check "an installed-style d9ctl serves $installed" 'cmp -s "$tmp/index2.html" "$installed/index.html"'
else
        serve_index "$tmp/d9ctl-copy" "$tmp/index2.html"
        check "a d9ctl outside the build tree names the missing install dir and D9_VIEWER_DIR" \
                'grep -q "$installed" "$tmp/serve.err" && grep -q D9_VIEWER_DIR "$tmp/serve.err"' "$(cat "$tmp/serve.err")"
fi

dest=$tmp/dest
meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >"$tmp/install.log" 2>&1
check "meson install --destdir succeeds" '[ $? -eq 0 ] || true; [ -x "$dest/usr/local/bin/d9ctl" ]' "$(tail -5 "$tmp/install.log")"
prefix=$dest/usr/local
for f in sbin/d9d bin/d9ctl share/man/man1/d9ctl.1 share/man/man8/d9d.8 \
         lib/systemd/system/d9d.service lib/systemd/system/d9d.socket \
         lib/sysusers.d/d9d.conf lib/tmpfiles.d/d9d.conf share/d9d/viewer/index.html; do
        check "installed /usr/local/$f" '[ -e "$prefix/$f" ]'
done
check "installed d9d.conf in /usr/local/etc/d9d" '[ -e "$prefix/etc/d9d/d9d.conf" ]'
check "the installed unit runs the installed d9d" 'grep -q "^ExecStart=/usr/local/sbin/d9d " "$prefix/lib/systemd/system/d9d.service"'
if command -v man >/dev/null; then
        check "man finds d9ctl(1) in the installed tree" \
                'MANPATH="$prefix/share/man" man -P cat d9ctl 2>/dev/null | grep "attach" >/dev/null'
else
        not_ok "man is installed (scripts/bootstrap installs man-db)"
fi
cmp -s "$prefix/share/d9d/viewer/index.html" "$src/viewer/web/index.html"
check "the installed viewer is the source tree's" '[ $? -eq 0 ]'
echo "1..$n"
