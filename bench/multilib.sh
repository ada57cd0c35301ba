#!/bin/bash
# bench/multilib.sh: per-library estimates against exact figures, on a
# program whose heap belongs to several libraries in set shares
# (bench/workloads/multilib: liblayer_a.so 60% of the bytes allocated, _b
# 25%, _c 10%, _d 4%, the program 1%; each keeps a working set live at
# exit). Builds it with gcc into a temporary directory and runs
# bench/cmd/estimate -libraries on it (one --stacks full run for the exact
# figures, RUNS sampled runs, default 5), then -live (RUNS runs). MIB is
# what the program allocates in all (default 400: 50 MiB live at exit);
# RATE in the environment sets the sampling rate (estimate's -rate).
#
#   [RATE=64K] bench/multilib.sh [RUNS] [MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
mib=${2:-400}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=bench/workloads/multilib
for l in a b c d; do
  gcc -O2 -fPIC -shared -DLAYER=$l -o "$work/liblayer_$l.so" $src/layer.c
done
gcc -O2 -o "$work/multilib" $src/main.c -L"$work" -llayer_a -llayer_b -llayer_c -llayer_d -Wl,-rpath,"$work"
rate=()
[ -n "${RATE:-}" ] && rate=(-rate "$RATE")
go run ./bench/cmd/estimate -libraries -runs "$runs" "${rate[@]}" -- "$work/multilib" "$mib"
go run ./bench/cmd/estimate -runs "$runs" "${rate[@]}" -- "$work/multilib" "$mib"
