#!/usr/bin/env bash
# Run the redesign's guard benchmarks on two trees of labkit, alternately, in one sitting, and
# print each benchmark's last line per tree: a redesign keeps behaviour, measured (issue 24).
#
#   benchmarks/before_after.sh BEFORE_TREE AFTER_TREE [ROUNDS]
#
# Each tree is a checkout of this repository; its own benchmarks/ run against its own labkit
# (PYTHONPATH). ROUNDS (default 2) repeats the before/after alternation; every benchmark's
# medians are within its own run, so compare the ratios, not tokens/s across trees.
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); rounds=${3:-2}
run() {  # tree label script args...
  local tree=$1 label=$2; shift 2
  local line
  line=$(cd "$tree" && PYTHONPATH="$tree" python "$@" 2>/dev/null | tail -1)
  echo "$(date -u +%H:%M) load=$(cut -d' ' -f1 /proc/loadavg) $label $1: $line"
}
for round in $(seq "$rounds"); do
  for pair in "before $before" "after $after"; do
    set -- $pair
    run "$2" "$1" benchmarks/overhead.py --repeats 3
    run "$2" "$1" benchmarks/lab_overhead.py --pairs 3
    run "$2" "$1" benchmarks/pipeline.py --repeats 3
  done
done
