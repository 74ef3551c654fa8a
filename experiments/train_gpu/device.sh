#!/usr/bin/env bash
# The GPU checks of issues 24 and 28 in one call on a lent CUDA machine (an H200 here), from the
# repository root, with the wheels of hydra-core, omegaconf and antlr4 in .whl/ (the machine has
# torch, triton, pandas and the rest, and no network). Writes $OUT/log and $OUT/runs.tgz:
#   1. exp=kernels_gpu: every Triton kernel checked (bf16, fp16) against the fp32 reference, then
#      timed against SDPA / FlexAttention (the gate the training's kernels pass first);
#   2. exp=train_gpu (model=small, bf16 autocast) for softmax and lightning_hybrid, once with
#      backend=triton and once with backend=reference, eager (train.compile=false), a fixed
#      wall-clock budget each: tokens/s and the fraction of the bf16 matmul peak calibrated at start;
#   3. exp=serving's verify-k timing on CUDA for the shipped needle models (1K, one haystack);
#   4. ladder (issue 42, named only: not in the default set): exp=scale at widths 128, 256 and 512
#      for softmax, lightning_hybrid_h8 and gdn_hybrid, seed 0, each under a fixed token budget
#      (LADDER_NEEDLE_TOKENS for the needle curriculum, LADDER_CHAIN_TOKENS more for the chains),
#      rows packed to 64K tokens a step (the step compiled into CUDA graphs, batches made ahead,
#      no host read on the hot path: docs/clusters.md), then needles at 1x-16x and 1-4-hop chains:
#      records in $R/ladder, models in /tmp/cache_ladder (tar them into $OUT to ship them).
#      Its command was checked on the CPU at width 16 (LADDER_DEVICE=cpu LADDER_WIDTHS=[16], budgets
#      of 0.2-0.4M tokens, train.budget=60s: both designs trained, compiled a graph per batch shape
#      and were scored, 326 s); never run on a GPU yet. The compiled graphs (about ten batch shapes
#      over the curricula) cost compile time out of each model's train.budget.
# Usage: bash experiments/train_gpu/device.sh [kernels|train|serving|ladder ...] [-- extra kernels_gpu overrides]
# (no step named: the first three). The shipped models beyond serving's three may be moved out of the
# tree for the call: the device tool carries at most 64 MiB of working tree.
set -uo pipefail
steps=(); extra=()
while [ $# -gt 0 ]; do [ "$1" = -- ] && { shift; extra=("$@"); break; }; steps+=("$1"); shift; done
[ ${#steps[@]} -eq 0 ] && steps=(kernels train serving)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=/tmp/runs; mkdir -p $R
exec > >(tee "$OUT/log") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$PWD"/.whl/*.whl || exit 1
# the package as pip would lay it out (kernels/ and conf/ ship inside attnbench), without a build
P=/tmp/pkg; rm -rf $P /tmp/runs/*; mkdir -p $P && cp -r attnbench $P/ && cp -r kernels $P/attnbench/kernels && cp -r conf $P/attnbench/conf
cd /tmp  # not the checkout: its attnbench/ (without kernels/ and conf/ inside) would shadow $P
export PYTHONPATH=$P:/tmp/site PYTHONUNBUFFERED=1 WANDB_MODE=disabled ATTNBENCH_CACHE=/tmp/cache
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
save() { (cd $R && tar czf "$OUT/runs.tgz" .); }
common="wandb.mode=disabled report.enabled=false"
want kernels && { date; timeout ${KERNELS_TIMEOUT:-150} python3 -m attnbench +exp=kernels_gpu exp.budget=${KERNELS_BUDGET:-120s} $common \
  hydra.run.dir=$R/kernels_gpu "${extra[@]}"; save; }
want train && for b in triton reference; do
  date; ATTNBENCH_CACHE=/tmp/cache_$b timeout 115 python3 -m attnbench +exp=train_gpu backend=$b train.compile=false train.budget=40s exp.budget=100s \
    $common hydra.run.dir=$R/train_gpu_$b 2>&1 | grep -v "it/s\]$"; save
done
want ladder && { date; ATTNBENCH_CACHE=/tmp/cache_ladder timeout ${LADDER_TIMEOUT:-540} python3 -m attnbench +exp=scale \
  device=${LADDER_DEVICE:-cuda} "scale.widths=${LADDER_WIDTHS:-[128,256,512]}" 'scale.seeds=[0]' \
  "exp.designs=${LADDER_DESIGNS:-[softmax,lightning_hybrid_h8,gdn_hybrid]}" scale.budget_scaling=fixed \
  scale.needle_token_budget=${LADDER_NEEDLE_TOKENS:-8000000} train.token_budget=${LADDER_CHAIN_TOKENS:-12000000} \
  train.chain_token_budget=${LADDER_CHAIN_TOKENS:-12000000} train.tokens_per_step=65536 train.batch=1000000 \
  scale.needle_probes=${LADDER_PROBES:-100} exp.budget=${LADDER_BUDGET:-9m} train.budget=${LADDER_TRAIN_BUDGET:-50s} \
  $common hydra.run.dir=$R/ladder 2>&1 | grep -v "step/s\]$"; save; }
want serving && date && timeout 75 python3 -m attnbench +exp=serving device=cuda 'eval.context_lens=[1024]' eval.haystacks=1 exp.budget=65s \
  $common hydra.run.dir=$R/serving_gpu && save
date; ls -R $R | head -50
