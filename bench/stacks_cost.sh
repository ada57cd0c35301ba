#!/bin/bash
# bench/stacks_cost.sh: what --stacks costs, against heaptrack, in one run.
#
# Runs python3.11 (bench/workloads/python_bench.py 1, PYTHONMALLOC=malloc)
# sqlite3 (200000 rows of bench/workloads/sqlite_bench.sql) and redis-server
# (under redis-benchmark -P 16 -n 300000 -t set,get,lpush,lpop; the whole
# server run is timed, start to exit) ROUNDS times each (default 5),
# interleaved: plain under glibc, under `tagalloc run`
# (untracked), with --stacks sampled -o, with --stacks full -o, under
# heaptrack (recording), and heaptrack's recording plus heaptrack_print (its
# analysis, which tagalloc's report includes). Prints the medians of wall
# time and the ratios the issue sets targets for. Needs heaptrack, sqlite3,
# redis-server and a python3.11 (the pyenv one if present).
#
#   bench/stacks_cost.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/tagalloc" ./cmd/tagalloc
TA=$work/tagalloc
PY=$(command -v python3.11 || true)
for p in /root/.pyenv/versions/3.11*/bin/python3.11; do [ -x "$p" ] && PY=$p; done
for t in heaptrack heaptrack_print sqlite3 redis-server redis-benchmark redis-cli; do
  command -v $t >/dev/null || { echo "stacks_cost.sh: $t is not installed" >&2; exit 1; }
done
[ -n "$PY" ] || { echo "stacks_cost.sh: no python3.11" >&2; exit 1; }

port=$((20000 + RANDOM % 20000))
redis() { # PREFIX...: a server under PREFIX, benchmarked, shut down
  "$@" redis-server --port $port --save "" --appendonly no &
  local pid=$! i
  for i in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.05; done
  redis-benchmark -p $port -P 16 -n 300000 -t set,get,lpush,lpop -q
  redis-cli -p $port shutdown nosave || true
  wait $pid || true
}
workload() { # WORKLOAD PREFIX...
  local w=$1; shift
  case $w in
    python) PYTHONMALLOC=malloc "$@" "$PY" bench/workloads/python_bench.py 1 ;;
    sqlite) "$@" sqlite3 -cmd ".parameter set @rows 200000" :memory: <bench/workloads/sqlite_bench.sql ;;
    redis) redis "$@" ;;
  esac
}
now() { date +%s.%N; }
for r in $(seq "$rounds"); do
  for w in python sqlite redis; do
    for v in glibc tagalloc sampled full heaptrack; do
      rm -f "$work"/ht.*
      case $v in
        glibc) pre=(env) ;;
        tagalloc) pre=("$TA" run -q --) ;;
        sampled) pre=("$TA" run -q --stacks sampled -o "$work/r.json" --) ;;
        full) pre=("$TA" run -q --stacks full -o "$work/r.json" --) ;;
        heaptrack) pre=(heaptrack -o "$work/ht") ;;
      esac
      s=$(now)
      workload $w "${pre[@]}" >/dev/null 2>&1
      e=$(now)
      echo "$w $v $(echo "$e - $s" | bc)" >>"$work/times"
      if [ $v = heaptrack ]; then
        heaptrack_print "$work"/ht.* >/dev/null 2>&1
        echo "$w heaptrack+print $(echo "$(now) - $s" | bc)" >>"$work/times"
      fi
    done
  done
done
awk '
  { t[$1" "$2] = t[$1" "$2] " " $3 }
  function median(s,   a, n, i, j, x) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    printf "%-8s %8s %9s %8s %8s %10s %16s\n", "workload", "glibc", "tagalloc", "sampled", "full", "heaptrack", "heaptrack+print"
    split("python sqlite redis", ws, " ")
    for (k = 1; k <= 3; k++) {
      w = ws[k]
      g = median(t[w" glibc"]); u = median(t[w" tagalloc"]); s = median(t[w" sampled"]); f = median(t[w" full"])
      h = median(t[w" heaptrack"]); hp = median(t[w" heaptrack+print"])
      printf "%-8s %7.3fs %8.3fs %7.3fs %7.3fs %9.3fs %15.3fs\n", w, g, u, s, f, h, hp
      printf "   sampled/untracked %.3f (target <= 1.15); heaptrack overhead / sampled overhead %.1fx (each vs its untracked run; target >= 10)\n", s / u, (h - g) / (s - u > 0.001 ? s - u : 0.001)
      printf "   full/heaptrack %.3f, full/(heaptrack+print) %.3f (target < 1)\n", f / h, f / hp
    }
  }' "$work/times"
