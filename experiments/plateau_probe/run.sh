#!/usr/bin/env bash
# The plateau probes, in the order they were run. Each sweep uses Hydra's joblib launcher
# (two one-thread jobs at a time); every job's records land in its own folder under the sweep
# dir. A job resumes from its partial checkpoint when rerun (the patience is not in the key).
set -euo pipefail
cd "$(dirname "$0")/../.."
common=(hydra/launcher=joblib hydra.launcher.n_jobs=2 threads=1 wandb.mode=disabled report.enabled=false
        train.weight_decay=0.1 train.patience=6000)
hy=attention.lightning_hybrid
sweep() { local dir=$1; shift; python -m attnbench -m +exp=plateau_probe "$@" hydra.sweep.dir=experiments/plateau_probe/$dir "${common[@]}"; }
case "${1:-all}" in
  lr|all)     sweep lr $hy.lightning_heads=2 $hy.qkv_conv=0 train.lr=1e-3,1e-2 ;;&          # 4 layers LLLS: learning rate
  heads|all)  sweep heads $hy.lightning_heads=8 $hy.qkv_conv=0 train.lr=1e-3,1e-2 ;;&       # 8 lightning heads (decays 0.61 .. 0.996)
  conv|all)   sweep conv $hy.lightning_heads=2,8 $hy.qkv_conv=4 train.lr=1e-3 ;;&           # the labelled short-conv variant
  layout|all) sweep layout model.n_layers=8 $hy.layout=LLLLLLLS,LLLSLLLS,LLLLLLSS $hy.lightning_heads=2 train.lr=1e-3 ;;&  # 7:1 vs 3:1 at 8 layers
  refs|all)   sweep refs 'exp.designs=[softmax,lightning]' design=softmax,lightning train.lr=1e-3 ;;&
esac
