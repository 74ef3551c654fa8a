#!/usr/bin/env bash
# experiments/external: attnbench's needle and chain tasks through three routes to the same shipped
# models: attnbench in-process, transformers from an exported folder, and a `transformers serve`
# process on localhost asked through the openai client. Run from a clean checkout, in the
# repository root, with the test extra installed (README). The exported folders are rebuilt here
# (experiments/external/exported/, not kept in git: `python -m attnbench export` makes them).
set -euo pipefail
cd "$(dirname "$0")/../.."
X=experiments/external
COMMON=(threads=1 wandb.mode=disabled)
NEEDLE=(softmax-e088d84f15ecfe2d lightning_hybrid_h8-94a662842d5825f0)          # needle models, seed 0
CHAIN=(softmax-48cfdb9b71dc3acd lightning_hybrid_h8-d2d189e7963be0d1)           # chain models, seed 0

# the endpoint route: serve_and_run MODEL EXP RUN_DIR [overrides...]. `transformers serve` is the console
# script, not `python -m` here: that would put the repository root on sys.path, where kernels/ (attnbench's)
# shadows the PyPI package `kernels` transformers imports.
# The port is fixed (PORT): the URL is part of the run's config, so a rerun resumes the same run directory.
PORT=8127
serve_and_run() {
  local m=$1 exp=$2 dir=$3 port=$PORT; shift 3
  transformers serve "$X/exported/$m" --host 127.0.0.1 --port "$port" --device cpu \
    --dtype float32 --trust-remote-code --log-level warning > "/tmp/serve_$m.log" 2>&1 &
  local pid=$!
  python -c "import sys, time, urllib.request
for _ in range(120):
    try:
        urllib.request.urlopen(sys.argv[1], timeout=2); break
    except OSError:
        time.sleep(1)" "http://127.0.0.1:$port/v1/models"
  python -m attnbench +exp="$exp" external.model="endpoint:http://127.0.0.1:$port/v1" external.served_name="$X/exported/$m" \
    "${COMMON[@]}" "$@" hydra.run.dir="$dir" || { kill "$pid"; return 1; }
  kill "$pid"; wait "$pid" 2> /dev/null || true
}

for m in "${NEEDLE[@]}" "${CHAIN[@]}"; do
  python -m attnbench export "attnbench/trained/$m" "$X/exported/$m"
done
for m in "${NEEDLE[@]}"; do
  d=${m%%-*}
  python -m attnbench +exp=needle_external external.model="attnbench:attnbench/trained/$m" "${COMMON[@]}" hydra.run.dir="$X/needle_attnbench_$d"
  python -m attnbench +exp=needle_external external.model="hf:$X/exported/$m" "${COMMON[@]}" hydra.run.dir="$X/needle_hf_$d"
  serve_and_run "$m" needle_external "$X/needle_endpoint_$d"
done
for m in "${CHAIN[@]}"; do
  d=${m%%-*}
  python -m attnbench +exp=multihop_external external.model="attnbench:attnbench/trained/$m" "${COMMON[@]}" hydra.run.dir="$X/chain_attnbench_$d"
  python -m attnbench +exp=multihop_external external.model="hf:$X/exported/$m" "${COMMON[@]}" hydra.run.dir="$X/chain_hf_$d"
  serve_and_run "$m" multihop_external "$X/chain_endpoint_$d"
done
