#!/bin/bash
# The curriculum-order study of issue 47 on the mini arena: `study --orders pairs` then `--orders latin`, 3 seeds,
# 100 greedy tasks per suite, into one run folder. On a 2-core machine the training is split in two one-thread
# processes over disjoint prefix trees (the orders starting with math or search, and those starting with ecom or
# if); both write the same folder (the run lock serialises the manifest), then the two whole designs reuse every
# trained stage and compute the findings and the diagnostics (orders.json, docs/study.md).
#
#   benchmarks/orders_mini.sh RUN_DIR [LOG_DIR]      # resumable: rerun it after an interruption
set -u
RUN=${1:?usage: benchmarks/orders_mini.sh RUN_DIR [LOG_DIR]}
LOG=${2:-$RUN-logs}
mkdir -p "$LOG"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cli() { nice -n "${NICE:-10}" aclarena-diag "$@"; }
half() {  # a design split in two processes; $1: name, $2 and $3: the two halves' orders
  cli study --orders "$2" --run "$RUN" --seeds 3 -n 100 --no-diagnostics --yes > "$LOG/$1-a.log" 2>&1 &
  local a=$!
  sleep 120   # the first process copies the shipped base; the second then finds it finished
  cli study --orders "$3" --run "$RUN" --seeds 3 -n 100 --no-diagnostics --yes > "$LOG/$1-b.log" 2>&1 &
  local b=$!
  wait $a; echo "$1-a rc=$?" >> "$LOG/status.txt"
  wait $b; echo "$1-b rc=$?" >> "$LOG/status.txt"
}
date -u >> "$LOG/status.txt"
half pairs 'math,search;math,ecom;math,if;search,math;search,ecom;search,if' \
           'ecom,math;ecom,search;ecom,if;if,math;if,search;if,ecom'
# the Williams square of `--orders latin` (math, search, ecom, if), two orders per process
half latin 'math,search,if,ecom;search,ecom,math,if' 'ecom,if,search,math;if,math,ecom,search'
cli study --orders pairs --run "$RUN" --seeds 3 -n 100 --yes > "$LOG/pairs.log" 2>&1; echo "pairs rc=$?" >> "$LOG/status.txt"
cli study --orders latin --run "$RUN" --seeds 3 -n 100 --yes > "$LOG/latin.log" 2>&1; echo "latin rc=$?" >> "$LOG/status.txt"
date -u >> "$LOG/status.txt"
