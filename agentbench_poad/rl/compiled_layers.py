"""The opt-in ``torch.compile`` of the decoder stack that the update's scoring passes run.

``PPOConfig.compile_layers`` (off by default): the policy runs the stack of its gradient passes
(:meth:`~agentbench_poad.rl.action_scoring.ActionScoring._slot_reader`: with ``lora_layers``
the adapted top layers from the cached frozen states, else the whole stack) through
``torch.compile(decoder, dynamic=True)`` (inductor), made once per policy on first use
(:func:`compiled_stack`). Passes without gradients (rollouts, evaluation, the critic's frozen
features) stay eager: sharing the compiled stack there would compile a second (inference)
graph for no measured gain.

Not exact: inductor fuses and reorders float operations, so log-probs and gradients differ
from the eager pass by float rounding (``benchmarks/compile_probe.py``: ~3e-5 on states of size
~22, ~3e-7 on LoRA gradients), and a run with it is not bit-identical to one without it.
``dynamic=True`` makes one graph for every (rows, width, read slots) shape of the prefix
forest; duck sizing is off while it compiles (two sizes that happen to be equal at the first
call get no shared symbol and no equality guard), so which kernels a pass uses does not depend
on which shapes came first (a resumed run compiles the same graphs).

Where inductor cannot compile (no C++ compiler for CPU, no triton for a GPU),
:func:`check_compile_layers` fails at set-up with the fix (``--set compile_layers=false``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["check_compile_layers", "compile_layers_problem", "compiled_stack"]

#: The override that turns the option off (named in the set-up error).
TURN_OFF = "--set compile_layers=false"


def _smoke(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x) * 2.0 + 1.0


@functools.cache
def _problem_on(device: str) -> str | None:
    try:
        compiled = torch.compile(_smoke, dynamic=False)
        x = torch.randn(4, 8, device=device, requires_grad=True)
        out = compiled(x)  # one call: the forward and backward of one graph
        out.sum().backward()
        if x.grad is None or not torch.allclose(out.detach(), _smoke(x).detach(), atol=1e-5):
            return "a compiled test function gave wrong values"
    except Exception as error:  # noqa: BLE001 - any failure means: inductor does not work here
        lines = f"{type(error).__name__}: {error}".strip().splitlines()
        return lines[0][:300] if lines else type(error).__name__
    return None


def _device(device: Any) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def compile_layers_problem(device: Any) -> str | None:
    """None when inductor compiles (forward and backward) on ``device`` (``"auto"``: the GPU if
    one is visible) here, else why not (one line). A small function is compiled once per device
    and process (seconds)."""
    return _problem_on(str(_device(device)))


def check_compile_layers(device: Any) -> None:
    """Fail fast when ``compile_layers`` cannot work on ``device``.

    Raises:
        ValueError: inductor cannot compile here; the message says why and names the fixes.
    """
    problem = compile_layers_problem(device)
    if problem is not None:
        kind = _device(device).type
        needs = "triton for the GPU" if kind == "cuda" else "a working C++ compiler (g++ or clang)"
        raise ValueError(
            f"compile_layers=True needs torch.compile's inductor backend, which cannot compile "
            f"on {kind} here ({problem}): install {needs}, or run without it: {TURN_OFF}"
        )


class _NoDuckSizing:
    """Calls the compiled stack with duck sizing off (see the module docstring). A plain object,
    not a module: kept on the policy, it adds nothing to its parameters or state dict."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.fx.experimental import _config as fx_config

        with fx_config.patch(use_duck_shape=False):
            return self.compiled(*args, **kwargs)


def compiled_stack(decoder: torch.nn.Module) -> Any:
    """``decoder`` compiled with ``torch.compile(..., dynamic=True)``: called as the decoder is,
    it runs whichever layers, norm and position-wise parts the decoder holds at the call
    (:meth:`~agentbench_poad.rl.policy_model.PolicyModel._only_layers`, ``_top_layer_at``)."""
    return _NoDuckSizing(torch.compile(decoder, dynamic=True))
