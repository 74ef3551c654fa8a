"""The one tolerance rule of every kernel check: the tests, the correctness gate
(attnbench/bench/gate.py) and the benchmarks' checks (exp kernels_cpu, kernels_gpu).

FlashAttention's rule: a result's error against the truth may be at most twice the error plain
torch makes in the same dtype, plus a rounding floor of a few units in the last place of the
output's magnitude (at least 1: inputs are of unit scale, and an exactly-zero truth, such as dq
of a window of one, still meets rounding noise):

    max |got - truth| <= 2 max |plain - truth| + FLOOR_ULPS eps(dtype) max(max |truth|, 1)

The truth is the op's naive formula in float64 (kernels/<op>/naive.py), or, at shapes too large
for a dense formula, the fp32 reference; "plain torch in the same dtype" is the naive formula
(or the reference) run in the dtype being checked.
"""

from __future__ import annotations

import math

import torch

FLOOR_ULPS = 4  # rounding floor, in units of the dtype's epsilon times max |truth|
TIE_RTOL = 1e-5  # msa block scores closer than this (relative, and absolute below 1) tie to fp32 rounding:
# a kernel may choose either block (its fp32 sums run in another order than the float64 truth's)


def max_error(got: torch.Tensor, truth: torch.Tensor) -> tuple[float, float]:
    """(max |got - truth|, max |truth|), in float64."""
    got, truth = got.detach().double(), truth.detach().double()
    return float((got - truth).abs().max()), float(truth.abs().max())


def bound(torch_err: float, scale: float, dtype: torch.dtype) -> float:
    """The largest error allowed: 2 torch_err + FLOOR_ULPS eps(dtype) max(scale, 1)."""
    return 2 * torch_err + FLOOR_ULPS * torch.finfo(dtype).eps * max(scale, 1.0)


def within(err: float, torch_err: float, scale: float, dtype: torch.dtype) -> tuple[bool, float]:
    """(err is finite and <= the bound, the bound)."""
    b = bound(torch_err, scale, dtype)
    return (math.isfinite(err) and err <= b), b


def check(got, truth, plain, dtype: torch.dtype | None = None) -> tuple[bool, float, float, float]:
    """(passed, err, torch_err, bound) of got against truth, plain (torch in got's dtype, or in
    ``dtype``) the yardstick; a non-finite element of got fails."""
    dtype = dtype or got.dtype
    err, scale = max_error(got, truth)
    torch_err = max_error(plain, truth)[0]
    ok, b = within(err, torch_err, scale, dtype)
    return ok and bool(torch.isfinite(got).all()), err, torch_err, b


def assert_within(got, truth, plain, what: str, dtype: torch.dtype | None = None) -> None:
    """Raise, naming the worst element, unless got meets the rule (see check)."""
    dtype = dtype or got.dtype
    got, truth, plain = (x.detach().double() for x in (got, truth, plain))
    if got.shape != truth.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)} != {tuple(truth.shape)}")
    ok, _, torch_err, b = check(got, truth, plain, dtype)
    if not ok:
        err = (got - truth).abs()
        worst = int(torch.nan_to_num(err, nan=float("inf")).argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), got.shape))
        raise AssertionError(
            f"{what} ({dtype}): worst element {index}: got {float(got.flatten()[worst]):.6g}, "
            f"truth {float(truth.flatten()[worst]):.6g}, plain torch {float(plain.flatten()[worst]):.6g}; "
            f"|err| {float(err.flatten()[worst]):.3g} > bound {b:.3g} "
            f"(2 x torch error {torch_err:.3g} + floor {b - 2 * torch_err:.3g})"
        )
