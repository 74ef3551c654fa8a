#!/usr/bin/env bash
# The width ladder as this sitting ran it: one process per (design, seed, width), one thread,
# into run_<design>_s<seed>_w<width>/. Usage, from the repository root (a queue a core):
#     bash experiments/scale/run.sh "softmax 0 16" "softmax 1 16" ...
# Width 64 finds the shipped needle_4m and multihop models (no training); a rerun skips done cells
# and resumes an unfinished training from its checkpoint (the cache's, or one shipped as partial).
set -euo pipefail
cd "$(dirname "$0")/../.."
for job in "$@"; do
  read -r design seed width <<<"$job"
  python -m attnbench +exp=scale design="$design" "scale.seeds=[$seed]" "scale.widths=[$width]" threads=1 \
    wandb.mode=disabled report.enabled=false hydra.run.dir="experiments/scale/run_${design}_s${seed}_w${width}"
done
