import sys
import time
import torch
import os

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tests"))
from helpers import compose_cfg
from attnbench.training.trainer import train

os.environ.setdefault("ATTNBENCH_CACHE", "/tmp/attnbench-probe-cache")
torch.set_num_threads(1)
variant = sys.argv[1]
stages = {
    "keys_only": "[{n_keys: 16, n_values: 16, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 32, n_values: 16, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 64, n_values: 16, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 64, n_values: 32, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 64, n_values: 64, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4}]",
    "values_only": "[{n_keys: 16, n_values: 16, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 16, n_values: 32, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 16, n_values: 64, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 32, n_values: 64, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 64, n_values: 64, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4}]",
}[variant]
cfg = compose_cfg(
    ["+exp=train", "model.n_layers=2", "train.max_steps=2500", "train.force=true", "train.log_every=50", f"train.stages={stages}"]
)
t = time.time()
r = train(cfg, "softmax", torch.device("cpu")).record
print(variant, "status", r["status"], "steps", r["steps"], "stage_starts", r["stage_starts"], f"{time.time() - t:.0f}s", flush=True)
