"""The flash-attention tolerance rule, with a report of the worst element.

A kernel's error against the truth (the fp32 reference for 16-bit inputs, float64 for fp32
inputs) may be at most twice the error plain torch makes in the same dtype, plus a rounding
floor of a few units in the last place of the output's magnitude (at least 1: the tests'
inputs are of unit scale, and an exactly-zero truth, such as dq of a window of one, still
meets rounding noise).
"""

from __future__ import annotations

import torch

FLOOR_ULPS = 4  # rounding floor, in units of the dtype's epsilon times max |truth|


def assert_within(got, truth, torch_same_dtype, what: str, dtype: torch.dtype | None = None) -> None:
    """|got - truth|.max() <= 2 |torch_same_dtype - truth|.max() + FLOOR_ULPS eps max(max|truth|, 1)."""
    dtype = dtype or got.dtype
    got, truth, plain = (x.detach().double() for x in (got, truth, torch_same_dtype))
    if got.shape != truth.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)} != {tuple(truth.shape)}")
    err = (got - truth).abs()
    torch_err = float((plain - truth).abs().max())
    floor = FLOOR_ULPS * torch.finfo(dtype).eps * max(float(truth.abs().max()), 1.0)
    bound = 2 * torch_err + floor
    worst = int(torch.nan_to_num(err, nan=float("inf")).argmax())
    if not bool(torch.isfinite(got).all()) or float(err.flatten()[worst]) > bound:
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), got.shape))
        raise AssertionError(
            f"{what} ({dtype}): worst element {index}: got {float(got.flatten()[worst]):.6g}, "
            f"truth {float(truth.flatten()[worst]):.6g}, plain torch {float(plain.flatten()[worst]):.6g}; "
            f"|err| {float(err.flatten()[worst]):.3g} > bound {bound:.3g} "
            f"(2 x torch error {torch_err:.3g} + floor {floor:.3g})"
        )
