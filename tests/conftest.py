import os

# Triton kernels run on CPU tensors only under the interpreter, which Triton reads when a kernel
# module is imported: set it before any test imports one (tests/test_triton_ops.py). Nothing
# else in the suite touches Triton (backend "auto" is the reference on CPU).
os.environ.setdefault("TRITON_INTERPRET", "1")
# msa's gathered (training) tiles run eagerly in tests: torch.compile would recompile for every
# test shape (seconds each). tests/test_ops.py checks the compiled tiles against the eager ones.
os.environ.setdefault("ATTNBENCH_COMPILE", "0")
# Every test writes checkpoints, checks and samples into one cache of its own session, never the
# user's ~/.cache/attnbench (a training running beside the suite keeps its files there): a
# session starts from what CI starts from, an empty cache. A test that sets its own still wins.
if "ATTNBENCH_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["ATTNBENCH_CACHE"] = tempfile.mkdtemp(prefix="attnbench-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ATTNBENCH_CACHE"], ignore_errors=True)

import pytest
import torch

# Tests are sized for 2 CPU cores; keep torch from oversubscribing them.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
