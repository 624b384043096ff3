"""Inputs as NumPy arrays or torch tensors, and the tolerance of their comparison.

Shared by the property tests that run the advantage estimators on both kinds and both float
dtypes (tests/test_rl_math_properties.py, tests/test_archer_adrl_advantages.py); their reference
loops stay in the tests.
"""

from __future__ import annotations

import numpy as np
import torch


def as_kind(x, kind, dtype):
    """``x`` as a NumPy array or torch tensor of the float dtype (bools stay bools)."""
    x = np.asarray(x)
    if x.dtype != bool:
        x = x.astype(dtype)
    return torch.from_numpy(x.copy()) if kind == "torch" else x.copy()


def to_numpy(x):
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def tolerance(dtype, *arrays):
    """Absolute tolerance: float64 round-off, or float32 output rounding, of the magnitudes."""
    magnitude = max([1.0] + [float(np.nanmax(np.abs(a))) for a in arrays if np.size(a)])
    return magnitude * (1e-9 if dtype == np.float64 else 1e-5)
