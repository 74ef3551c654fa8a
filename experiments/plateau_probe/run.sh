#!/usr/bin/env bash
# The plateau probes, in the order they were run. Each sweep uses Hydra's joblib launcher
# (two one-thread jobs at a time); every job's records land in its own folder under the sweep
# dir. A job resumes from its partial checkpoint when rerun (the patience is not in the key).
set -euo pipefail
cd "$(dirname "$0")/../.."
common=(hydra/launcher=joblib hydra.launcher.n_jobs=2 threads=1 wandb.mode=disabled report.enabled=false
        train.weight_decay=0.1 train.patience=6000)
hy=attention.lightning_hybrid
# A job's folder is named by what its sweep varies (heads, conv, lr; the layout; the design), not
# by Hydra's default override string (up to ~200 characters): e.g. heads/h8_conv0_lr0.001.
variant="hydra.sweep.subdir=h\${$hy.lightning_heads}_conv\${$hy.qkv_conv}_lr\${train.lr}"
sweep() { local dir=$1; shift; python -m attnbench -m +exp=plateau_probe "$@" hydra.sweep.dir=experiments/plateau_probe/$dir "${common[@]}"; }
case "${1:-all}" in
  lr|all)     sweep lr $hy.lightning_heads=2 $hy.qkv_conv=0 train.lr=1e-3,1e-2 "$variant" ;;&          # 4 layers LLLS: learning rate
  heads|all)  sweep heads $hy.lightning_heads=8 $hy.qkv_conv=0 train.lr=1e-3,1e-2 "$variant" ;;&       # 8 lightning heads (decays 0.61 .. 0.996)
  conv|all)   sweep conv $hy.lightning_heads=2,8 $hy.qkv_conv=4 train.lr=1e-3 "$variant" ;;&           # the labelled short-conv variant
  layout|all) sweep layout model.n_layers=8 $hy.layout=LLLLLLLS,LLLSLLLS,LLLLLLSS $hy.lightning_heads=2 train.lr=1e-3 \
                "hydra.sweep.subdir=\${$hy.layout}" ;;&  # 7:1 vs 3:1 at 8 layers
  refs|all)   sweep refs 'exp.designs=[softmax,lightning]' design=softmax,lightning train.lr=1e-3 'hydra.sweep.subdir=${design}' ;;&
esac
