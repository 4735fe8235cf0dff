#!/usr/bin/env bash
# The BPF programs build from a kernel's BTF that has no bpf_task_work
# (Linux < 6.18): this machine's vmlinux.h with the type and its kfuncs cut
# out stands in for an older kernel's. The object must compile, carry the
# kfunc as a weak extern and still load here (where the kfunc exists), as
# d9d's loader loads it: the way off-CPU stacks are read on resume set as
# this kernel allows (load_sched_object).
#   build_without_task_work.sh CLANG BPFTOOL VMLINUX_H SOURCE_DIR LOADER
set -uo pipefail
clang=$1 bpftool=$2 vmlinux=$3 src=$4 loader=$5
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && sed 's/^/# /' <<<"$2"; }

python3 - "$vmlinux" "$tmp/vmlinux.h" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r"\nstruct bpf_task_work \{[^}]*\};\n", "\n", s)
s = "\n".join(l for l in s.split("\n") if not re.search(r"\bbpf_task_work_schedule_\w+\(", l))
open(sys.argv[2], "w").write(s)
PY
echo '/* as generated from a kernel without bpf_task_work */' >"$tmp/d9_vmlinux_features.h"
if grep -q "struct bpf_task_work {" "$tmp/vmlinux.h"; then
        not_ok "the stand-in vmlinux.h has no struct bpf_task_work"
else
        ok "the stand-in vmlinux.h has no struct bpf_task_work"
fi
out=$("$clang" -target bpf -g -O2 -D__TARGET_ARCH_x86 -D__D9_BPF__ -Wall -Werror -I"$tmp" -I"$src/bpf" \
        -c "$src/bpf/d9_sched.bpf.c" -o "$tmp/d9_sched.bpf.o" 2>&1)
if [ $? -eq 0 ]; then ok "d9_sched.bpf.c compiles without bpf_task_work in vmlinux.h"; else not_ok "d9_sched.bpf.c compiles without bpf_task_work in vmlinux.h" "$out"; fi
btf=$("$bpftool" btf dump file "$tmp/d9_sched.bpf.o" 2>&1)
if grep -q "FUNC 'bpf_task_work_schedule_resume_impl' .*linkage=extern" <<<"$btf" &&
   grep -q "STRUCT 'bpf_task_work' size=8" <<<"$btf"; then
        ok "the object declares the kfunc as an extern and the task_work field by its kernel name"
else
        not_ok "the object declares the kfunc as an extern and the task_work field by its kernel name"
fi
out=$("$loader" "$tmp/d9_sched.bpf.o" 2>&1)
if [ $? -eq 0 ]; then
        ok "that object loads on this kernel (kfunc resolved, verifier accepts) $(head -1 <<<"$out")"
else
        not_ok "that object loads on this kernel (kfunc resolved, verifier accepts)" "$(tail -20 <<<"$out")"
fi
echo "1..$n"
