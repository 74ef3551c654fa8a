#!/usr/bin/env bash
# The plateau probes, in the order they were run (each sweep: Hydra's joblib launcher, two
# one-thread jobs at a time; every job's records land in its own folder under the sweep dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
common=(hydra/launcher=joblib hydra.launcher.n_jobs=2 threads=1 wandb.mode=disabled report.enabled=false)
case "${1:-all}" in
  factorial|all)  # 4 layers LLLS: lightning heads x short conv x learning rate (weight decay 0.1, Zoology's)
    python -m attnbench -m +exp=plateau_probe attention.lightning_hybrid.lightning_heads=2,8 \
      attention.lightning_hybrid.qkv_conv=0,4 train.lr=1e-3,1e-2 train.weight_decay=0.1 train.patience=10000 \
      hydra.sweep.dir=experiments/plateau_probe/factorial "${common[@]}" ;;&
  refs|all)  # 4 layers: all-softmax and all-lightning beside the hybrid, stock recipe
    python -m attnbench -m +exp=plateau_probe design=softmax,lightning train.patience=10000 \
      'exp.designs=[softmax,lightning]' hydra.sweep.dir=experiments/plateau_probe/refs "${common[@]}" ;;&
esac
