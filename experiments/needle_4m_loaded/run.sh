#!/usr/bin/env bash
# The README's main command with two busy-loop processes beside it on the 2 cores (issue 29):
# a new user's machine that other jobs keep busy. Run from the repository root:
#     bash experiments/needle_4m_loaded/run.sh                 # two loops: into run/
#     BUSY=0 OUT=run-no-loops bash experiments/needle_4m_loaded/run.sh   # no loops: the machine's own load
# It writes experiments/needle_4m_loaded/$OUT/ (results.jsonl, run.log, report.html, report.pdf).
# Like the README's command it starts from an empty $ATTNBENCH_CACHE and Inductor cache; the
# training-length checks come from the checks.json shipped beside each checkpoint (made once by
# ATTNBENCH_SHIP_CHECKS=1: attnbench/trained/README.md), so the train/acc records of this run say
# checks=stored, check_s=0. The load the run saw (the loops, the run itself and whatever else the
# machine runs) is in its records: eval/prefill_s load_before/load, eval/budget_summary load.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=experiments/needle_4m_loaded/${OUT:-run}
mkdir -p "$out"
busy() { while :; do :; done; }
loops=()
for _ in $(seq 1 "${BUSY:-2}"); do
  busy &
  loops+=("$!")
done
trap 'for p in "${loops[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
cache=$(mktemp -d) inductor=$(mktemp -d)
ATTNBENCH_CACHE=$cache TORCHINDUCTOR_CACHE_DIR=$inductor \
  python -m attnbench +exp=needle_4m wandb.mode=disabled hydra.run.dir="$out" 2>&1 | tee "$out/run.log"
rm -rf "$cache" "$inductor"
