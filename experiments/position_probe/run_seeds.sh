#!/usr/bin/env bash
# position_probe at the other seeds shipped (issue 24: per-seed spread): lightning_hybrid_nope,
# lightning_hybrid_h8 and softmax, each seed's own model on its own haystacks, at the probe's
# lengths (1K-64K), into experiments/position_probe/run_seed<S>/ (softmax_logn has seed 0 only).
# Run from the repository root:
#     bash experiments/position_probe/run_seeds.sh [SEED ...]      (default: 1 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(1 2)
for seed in "${seeds[@]}"; do
  out=experiments/position_probe/run_seed$seed
  rm -rf "$out"  # a run directory holds one config
  mkdir -p "$out"
  python -m attnbench +exp=position_probe seed="$seed" 'exp.designs=[lightning_hybrid_nope,lightning_hybrid_h8,softmax]' \
    threads=1 wandb.mode=disabled report.enabled=false hydra.run.dir="$out" 2>&1 | tee "$out/run.log"
done
