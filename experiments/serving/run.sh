#!/usr/bin/env bash
# exp=serving on the shipped needle_4m task models (claim C7): the run recorded in run/ (lightning_hybrid_h8,
# softmax, msa at 1K tokens, CPU), 20 haystacks x 5 depths = 100 probes a cell. The other recorded runs (run-long: 4K
# and 16K; run-more; run-chains; run-64k; run-gpu) are the README's other commands. Reruns skip finished cells.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python -m attnbench +exp=serving "eval.context_lens=[1024]" threads=1 wandb.mode=disabled report.pdf=false \
  hydra.run.dir=experiments/serving/run "$@"
