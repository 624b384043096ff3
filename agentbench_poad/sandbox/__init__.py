"""Run model-written Python safely: a Docker backend (default) and a weaker process fallback.

Example::

    import numpy as np
    from agentbench_poad.sandbox import Limits, run_code

    source = "def predict(x):\\n    return x.sum(axis=1)\\n"
    result = run_code(source, "predict", {"x": np.ones((3, 2))}, limits=Limits(wall_time_s=10))
    if result.ok:
        print(result.outputs["output"])        # array([2., 2., 2.])
    else:
        print(result.category.value, result.message)

The host never trusts the sandbox: arrays come back as ``.npy`` files read with
``allow_pickle=False`` and are checked (numeric dtype, finite, shape, size) before
``result.ok`` is true. See ``docs/sandbox.md`` for the threat model and the limits.
"""

from __future__ import annotations

from agentbench_poad.sandbox.api import (
    Backend,
    FailureCategory,
    Limits,
    SandboxResult,
    SandboxUnavailable,
)
from agentbench_poad.sandbox.concurrency import MachineSlots, concurrency_limit
from agentbench_poad.sandbox.registry import get_backend, run_code, sandbox_status

__all__ = [
    "Backend",
    "FailureCategory",
    "Limits",
    "MachineSlots",
    "SandboxResult",
    "SandboxUnavailable",
    "concurrency_limit",
    "get_backend",
    "run_code",
    "sandbox_status",
]
