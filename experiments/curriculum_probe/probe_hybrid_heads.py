import sys
import time
import torch
import os

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tests"))
from helpers import compose_cfg
from attnbench.training.trainer import train

os.environ.setdefault("ATTNBENCH_CACHE", "/tmp/attnbench-probe-cache")
torch.set_num_threads(1)
heads, layout = sys.argv[1], sys.argv[2]
cfg = compose_cfg(
    [
        "+exp=train",
        f"model.n_layers={len(layout)}",
        "train.max_steps=2500",
        "train.patience=2500",
        "train.force=true",
        "train.log_every=50",
        f"attention.lightning_hybrid.layout={layout}",
        f"attention.lightning_hybrid.lightning_heads={heads}",
    ]
)
t = time.time()
r = train(cfg, "lightning_hybrid", torch.device("cpu")).record
print(heads, layout, "status", r["status"], "steps", r["steps"], "stage_starts", r["stage_starts"], f"{time.time() - t:.0f}s", flush=True)
