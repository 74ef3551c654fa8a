#!/usr/bin/env bash
# needle_4m's learned designs at the other seeds shipped (issue 24: per-seed spread): softmax,
# msa and lightning_hybrid_h8, each seed's own model on its own haystacks (a seed picks both),
# at 1K-16K with 6 haystacks a cell (30 probes), into experiments/needle_4m/run_seed<S>/.
# The 64K-4M cells stay with the seed-0 run (run/). Run from the repository root:
#     bash experiments/needle_4m/run_seeds.sh [SEED ...]      (default: 1 2)
# A design with no shipped model at a seed would be trained first (attnbench/trained/README.md
# lists what is shipped).
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=("$@")
[ ${#seeds[@]} -eq 0 ] && seeds=(1 2)
for seed in "${seeds[@]}"; do
  out=experiments/needle_4m/run_seed$seed
  rm -rf "$out"  # a run directory holds one config
  mkdir -p "$out"
  python -m attnbench +exp=needle_4m seed="$seed" 'exp.designs=[softmax,msa,lightning_hybrid_h8]' \
    'eval.context_lens=[1024,4096,16384]' threads=1 wandb.mode=disabled report.enabled=false exp.budget=30m \
    hydra.run.dir="$out" 2>&1 | tee "$out/run.log"
done
