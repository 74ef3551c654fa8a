#!/usr/bin/env bash
# exp=serving on the shipped needle_4m task models (claim C7), the scope recorded here:
# 1K tokens (time allowed no more on a loaded machine), 20 haystacks x 5 depths = 100 probes a cell. Reruns skip finished cells.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python -m attnbench +exp=serving "eval.context_lens=[1024]" threads=1 wandb.mode=disabled report.pdf=false \
  hydra.run.dir=experiments/serving/run "$@"
