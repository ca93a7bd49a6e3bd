#!/bin/bash
# The curriculum-order study of issue 47 on the mini arena: `study --orders pairs` then `--orders latin`, 3 seeds,
# 100 greedy tasks per suite, into one run folder. On a 2-core machine the training runs as two one-thread chains
# over disjoint prefix trees: A trains the pairs starting with math or search, then the two latin orders starting
# with math or search (which only extend A's stages); B the same for ecom and if. Both write the same folder (the
# run lock serialises the manifest). Then the two whole designs, with both threads, reuse every trained stage and
# compute the findings and the diagnostics (orders.json, docs/study.md).
#
#   benchmarks/orders_mini.sh RUN_DIR [LOG_DIR]      # resumable: rerun it after an interruption
set -u
RUN=${1:?usage: benchmarks/orders_mini.sh RUN_DIR [LOG_DIR]}
LOG=${2:-$RUN-logs}
mkdir -p "$LOG"
export MKL_NUM_THREADS=1
cli() { nice -n "${NICE:-10}" aclarena-diag "$@"; }
train() {  # $1: log name, $2: orders; one thread, no evaluation yet
  OMP_NUM_THREADS=1 cli study --orders "$2" --run "$RUN" --seeds 3 -n 100 --no-diagnostics --yes > "$LOG/$1.log" 2>&1
  echo "$1 rc=$?" >> "$LOG/status.txt"
}
date -u >> "$LOG/status.txt"
# the Williams square of `--orders latin` (math, search, ecom, if), split by first domain as the pairs are
(train pairs-a 'math,search;math,ecom;math,if;search,math;search,ecom;search,if'
 train latin-a 'math,search,if,ecom;search,ecom,math,if') &
a=$!
sleep 120   # chain A copies the shipped base first; chain B then finds it finished
(train pairs-b 'ecom,math;ecom,search;ecom,if;if,math;if,search;if,ecom'
 train latin-b 'ecom,if,search,math;if,math,ecom,search') &
b=$!
wait $a $b
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2   # MKL_NUM_THREADS=1 alone keeps torch at one thread
# each design writes RUN/orders.json; a copy of each is kept (docs/results/orders_mini_{pairs,latin}.json)
for design in pairs latin; do
  cli study --orders $design --run "$RUN" --seeds 3 -n 100 --yes > "$LOG/$design.log" 2>&1
  echo "$design rc=$?" >> "$LOG/status.txt"
  cp "$RUN/orders.json" "$RUN/orders_$design.json"
done
date -u >> "$LOG/status.txt"
