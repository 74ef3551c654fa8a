import sys
import time
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tests"))
from helpers import compose_cfg
from attnbench.training.trainer import train
import os

os.environ.setdefault("ATTNBENCH_CACHE", "/tmp/attnbench-probe-cache")
torch.set_num_threads(1)
variant = sys.argv[1]
base = [
    "+exp=train",
    "model.n_layers=2",
    "train.max_steps=1500",
    "train.force=true",
    "train.log_every=50",
    "train.stages=[{n_keys: 16, n_values: 16, n_filler: 16, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 32, n_values: 32, n_filler: 32, n_pairs: 4, context_len: 24, n_queries: 4},{n_keys: 64, n_values: 64, n_filler: 64, n_pairs: 4, context_len: 32, n_queries: 4}]",
]
extra = {
    "base": [],
    "rope1": ["model.rotary_frac=1.0"],
    "dense": ["model.n_experts=1", "model.top_k_experts=1", "model.d_expert=256"],
    "mha": ["model.n_kv_heads=2"],
    "lr2": ["train.lr=2e-3"],
    "all": ["model.rotary_frac=1.0", "model.n_experts=1", "model.top_k_experts=1", "model.d_expert=256", "model.n_kv_heads=2"],
}[variant]
cfg = compose_cfg(base + extra)
t = time.time()
r = train(cfg, "softmax", torch.device("cpu")).record
print(variant, "status", r["status"], "steps", r["steps"], "stage_starts", r["stage_starts"], f"{time.time() - t:.0f}s", flush=True)
