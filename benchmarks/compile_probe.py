"""Does ``torch.compile`` (inductor, CPU) speed up the adapted top layers' forward + backward?

Run: ``python benchmarks/compile_probe.py [--model M] [--threads 2] [--repeats 3]
[--variants stack,stack-dyn,layers,layers-dyn] [--cases N] [--epochs E --passes P] [--smoke]``.

On a busy two-core machine an eager pass of SmolLM2's top 8 layers takes seconds and each
compile minutes: ``--epochs 1 --passes 16`` records one epoch's 4 passes (the same kind of
shapes) while the break-even still counts the preset's 16 passes per update; ``--cases N``
keeps the first N.

A PPO update of the CPU preset spends most of its time in the forward and backward of the top
``lora_layers`` decoder layers (LoRA on q_proj and v_proj), run from the cached frozen states
entering them over a *prefix forest*: a few rows of at most ~256 slots, a 4-D additive mask (a
slot sees its ancestors), each slot at the position of its depth, the top layer's position-wise
parts at the read slots only (``ActionScoring._slot_reader``). This script measures what
compiling that computation gives, in one process:

1. builds the POAD policy of the CPU preset (``build_policy``: LoRA on the top 8 layers), runs
   one rollout (``_bench_model.collect_rollout``) and one PPO update, and records the inputs of
   every scoring pass the update backpropagates through (``_slot_reader`` with gradients on: its
   lower-layer states ``(R, W, H)``, mask ``(R, 1, W, W)``, positions ``(R, W)`` and read slots).
   These are the *cases*: one per minibatch pass, shapes as the forest makes them;
2. per variant, a pass over every case runs the package's own call path -- ``_only_layers`` (the
   decoder stack from the lowest adapted layer, final norm included) and ``_top_layer_at`` (the
   read slots), then a fixed random projection of the slots' states as the loss and its
   backward -- in eager mode or compiled:

   * ``stack`` / ``stack-dyn``: ``torch.compile`` of the decoder stack (the Llama model's forward
     over the top layers: rotary embeddings, layers, norm), ``dynamic=None`` / ``dynamic=True``;
   * ``layers`` / ``layers-dyn``: each of the top decoder layers compiled on its own (one
     module's forward, shared by the layers of the same shape: "regional" compilation);

3. prints, per variant: the warm-up (first compiled pass, compile included) against an eager
   pass, the per-pass medians of interleaved (eager, compiled) pairs and their ratio, the frames
   compiled and recompiles (with the first recompile reason), graph breaks, and the largest
   absolute difference of the read states and of the LoRA gradients against eager.

Bare seconds are for reading; the ratio is the figure (the machine's load moves both sides).
Inductor writes compiled kernels to an on-disk cache; by default a fresh temporary one, so the
warm-up is what a first run on a machine pays (``--cache-dir DIR`` keeps one across runs: run
twice to see what a later process pays). If inductor cannot compile here (no C++ compiler ...),
one line says why and the eager figures are printed; the exit status is 0.

``--smoke``: a tiny random Llama (4 layers, LoRA on the top 2), a two-env rollout and one
compiled variant: the plumbing in well under a minute (``tests/test_compile_probe.py``).

Model: ``--model``, else ``$AGENTBENCH_POAD_BENCH_MODEL``, else the cached named model
``smollm2-135m``, else a tiny random model (see ``benchmarks/_bench_model.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from _bench_model import collect_rollout, resolve_model

#: The compiled variants: name -> (what is compiled, torch.compile's ``dynamic``).
VARIANTS: dict[str, tuple[str, bool | None]] = {
    "stack": ("stack", None),
    "stack-dyn": ("stack", True),
    "layers": ("layers", None),
    "layers-dyn": ("layers", True),
}


@dataclass
class Case:
    """The inputs of one scoring pass of the update (one minibatch's forest)."""

    hidden: torch.Tensor
    """``(R, W, H)`` states entering the lowest adapted layer."""
    mask: Any
    """``(R, 1, W, W)`` additive mask as the decoder reads it (``_layer_masks``)."""
    positions: torch.Tensor
    """``(R, W)`` position of each slot."""
    slots: torch.Tensor
    """``(S, 2)`` (row, column) of each read slot."""
    probe: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    """``(S, H)`` fixed random weights over ``S``: the loss is ``(states at slots * probe).sum()``
    (a mean over the slots, as a PPO loss averages over tokens: gradients of order one)."""

    @property
    def flat(self) -> torch.Tensor:
        return self.slots[:, 0] * self.hidden.shape[1] + self.slots[:, 1]

    def shape(self) -> str:
        rows, width, _ = self.hidden.shape
        return f"{rows}x{width}/{self.slots.shape[0]}"


def capture_cases(algorithm: Any, buffer: Any, seed: int = 0) -> list[Case]:
    """Run one PPO update and keep the inputs of every scoring pass it backpropagates through."""
    policy = algorithm.policy
    original = policy._slot_reader
    cases: list[Case] = []

    def recording(inputs: torch.Tensor, forest: Any, slots: list) -> Any:
        if torch.is_grad_enabled() and inputs.is_floating_point():
            positions = forest.positions.to(policy.device)
            mask = forest.additive_mask(policy._mask_dtype(), policy.device)
            cases.append(
                Case(
                    hidden=inputs.detach().clone(),
                    mask=policy._layer_masks(mask, positions),
                    positions=positions,
                    slots=torch.tensor(slots, dtype=torch.long, device=policy.device),
                )
            )
        return original(inputs, forest, slots)

    policy._slot_reader = recording
    try:
        algorithm.update(buffer, torch.Generator().manual_seed(1))
    finally:
        del policy._slot_reader  # the class's method again
    generator = torch.Generator().manual_seed(seed)
    for case in cases:
        count = case.slots.shape[0]
        case.probe = (torch.randn((count, case.hidden.shape[-1]), generator=generator) / count).to(
            case.hidden
        )
    return cases


class Runner:
    """One way to run the top layers: eager, or a compiled stack or compiled layers."""

    def __init__(
        self,
        policy: Any,
        kind: str = "eager",
        dynamic: bool | None = None,
        backend: str = "inductor",
    ) -> None:
        from agentbench_poad.rl.policy_model import _decoder_of

        self.policy = policy
        self.kind = kind
        self.decoder = _decoder_of(policy._hf_model())
        self.start = policy.first_adapted_layer
        self.stack = None
        self.layers = None
        if kind == "stack":
            self.stack = torch.compile(self.decoder, dynamic=dynamic, backend=backend)
        elif kind == "layers":
            self.layers = torch.nn.ModuleList(
                torch.compile(layer, dynamic=dynamic, backend=backend)
                for layer in self.decoder.layers[self.start :]
            )

    def forward(self, case: Case) -> torch.Tensor:
        """The read slots' final states, through the package's own call path."""
        policy = self.policy
        with policy._only_layers(self.start) as decoder, policy._top_layer_at(case.flat):
            if self.layers is not None:
                decoder.layers = self.layers  # _only_layers puts the full stack back on exit
            run = self.stack if self.stack is not None else decoder
            out = run(
                inputs_embeds=case.hidden,
                attention_mask=case.mask,
                position_ids=case.positions,
                use_cache=False,
            )
        states = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return states[case.slots[:, 0], case.slots[:, 1]]

    def step(self, case: Case) -> torch.Tensor:
        """Forward + backward of one case; the read states (detached)."""
        states = self.forward(case)
        (states * case.probe).sum().backward()
        return states.detach()

    def run_pass(self, cases: list[Case]) -> float:
        """Seconds of forward + backward over every case (gradients dropped after each)."""
        params = self.policy.trainable_parameters()
        start = time.perf_counter()
        for case in cases:
            self.step(case)
            for p in params:
                p.grad = None
        return time.perf_counter() - start


def lora_grads(policy: Any) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in policy.trainable_parameters() if p.grad is not None]


def max_differences(
    reference: Runner, other: Runner, cases: list[Case]
) -> tuple[float, float, float, float]:
    """``(max |Δ states|, max |states|, max |Δ LoRA grads|, max |LoRA grads|)`` over cases."""
    params = reference.policy.trainable_parameters()
    d_out = d_grad = top_out = top_grad = 0.0
    for case in cases:
        results = []
        for runner in (reference, other):
            for p in params:
                p.grad = None
            out = runner.step(case)
            results.append((out, lora_grads(runner.policy)))
        (a, ga), (b, gb) = results
        d_out = max(d_out, float((a - b).abs().max()))
        top_out = max(top_out, float(a.abs().max()))
        if len(ga) != len(gb):
            return d_out, top_out, math.inf, math.inf
        for x, y in zip(ga, gb):
            d_grad = max(d_grad, float((x - y).abs().max()))
            top_grad = max(top_grad, float(x.abs().max()))
    for p in params:
        p.grad = None
    return d_out, top_out, d_grad, top_grad


def diff_cases(cases: list[Case]) -> list[Case]:
    """The cases the differences are taken on: the first of each row count (cost bounded)."""
    first: dict[int, Case] = {}
    for case in cases:
        first.setdefault(int(case.hidden.shape[0]), case)
    return list(first.values())


class RecompileLog(logging.Handler):
    """Collects dynamo's recompile reasons (``TORCH_LOGS=recompiles``) and limit warnings."""

    NAMES = ("torch._dynamo.guards.__recompiles", "torch._dynamo.convert_frame")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []
        self.limit_hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "recompile_limit" in message:
            self.limit_hits.append(message.splitlines()[0])
        elif record.name.endswith("__recompiles"):
            self.reasons.append(message)

    @contextlib.contextmanager
    def installed(self) -> Iterator[RecompileLog]:
        torch._logging.set_logs(recompiles=True)
        loggers = [logging.getLogger(n) for n in self.NAMES]
        saved = [(lg.propagate, lg.level) for lg in loggers]
        for lg in loggers:
            lg.addHandler(self)
        loggers[0].propagate = False  # collected here, not printed
        try:
            yield self
        finally:
            for lg, (propagate, level) in zip(loggers, saved):
                lg.removeHandler(self)
                lg.propagate, lg.level = propagate, level
            torch._logging.set_logs()

    def first_reason(self) -> str:
        if not self.reasons:
            return "-"
        lines = [line.strip() for line in self.reasons[0].splitlines() if line.strip()]
        return " | ".join(lines[1:3] or lines)[:160]


def counters() -> dict[str, int]:
    from torch._dynamo.utils import counters as dynamo

    return {
        "frames": int(dynamo["frames"].get("ok", 0)),
        "graphs": int(dynamo["stats"].get("unique_graphs", 0)),
        "breaks": int(sum(dynamo["graph_break"].values())),
    }


def inductor_problem() -> str | None:
    """None when inductor compiles a small function here, else why not (one line)."""
    try:
        fn = torch.compile(lambda x: torch.nn.functional.silu(x) * 2.0 + 1.0)
        x = torch.randn(4, 8, requires_grad=True)
        fn(x).sum().backward()
        expected = torch.nn.functional.silu(x.detach()) * 2.0 + 1.0
        if not torch.allclose(fn(x.detach()), expected, atol=1e-5):
            return "a compiled test function gave wrong values"
    except Exception as error:  # noqa: BLE001 - any failure means: no inductor here
        text = f"{type(error).__name__}: {error}".strip().splitlines()
        return text[0][:200] if text else type(error).__name__
    finally:
        torch._dynamo.reset()
    return None


def probe_variant(
    name: str,
    policy: Any,
    eager: Runner,
    cases: list[Case],
    repeats: int,
    eager_pass: float,
    backend: str = "inductor",
) -> dict[str, Any]:
    """Warm-up, interleaved timing and differences of one compiled variant."""
    kind, dynamic = VARIANTS[name]
    torch._dynamo.reset()
    before = counters()
    log = RecompileLog()
    with log.installed():
        runner = Runner(policy, kind, dynamic, backend)
        start = time.perf_counter()
        first_call = None
        params = policy.trainable_parameters()
        for case in cases:  # the warm-up pass: every shape once, compiling as it goes
            runner.step(case)
            for p in params:
                p.grad = None
            if first_call is None:
                first_call = time.perf_counter() - start
        warmup = time.perf_counter() - start
        after_warmup = counters()
        warm_reasons = len(log.reasons)
        eager_s, compiled_s = [], []
        for _ in range(repeats):
            eager_s.append(eager.run_pass(cases))
            compiled_s.append(runner.run_pass(cases))
        after_timing = counters()
        diffs = max_differences(eager, runner, diff_cases(cases))
    return {
        "name": name,
        "first_call": first_call or 0.0,
        "warmup": warmup,
        "compile_overhead": warmup - eager_pass,
        "eager": statistics.median(eager_s) / len(cases),
        "compiled": statistics.median(compiled_s) / len(cases),
        "ratio": statistics.median(e / c for e, c in zip(eager_s, compiled_s)),
        "frames": after_warmup["frames"] - before["frames"],
        "graphs": after_warmup["graphs"] - before["graphs"],
        "breaks": after_warmup["breaks"] - before["breaks"],
        "recompiles": warm_reasons,
        "late_frames": after_timing["frames"] - after_warmup["frames"],
        "late_recompiles": len(log.reasons) - warm_reasons,
        "limit_hits": len(log.limit_hits),
        "reason": log.first_reason(),
        "diffs": diffs,
    }


def report(result: dict[str, Any], updates: int, passes: int) -> None:
    d_out, top_out, d_grad, top_grad = result["diffs"]
    saving = result["eager"] - result["compiled"]
    print(
        f"\n[{result['name']}] warm-up pass {result['warmup']:.1f} s (first call "
        f"{result['first_call']:.1f} s); compile overhead over an eager pass "
        f"{result['compile_overhead']:.1f} s"
    )
    print(
        f"  compiled frames {result['frames']}, graphs {result['graphs']}, recompiles "
        f"{result['recompiles']} over the shapes (later: {result['late_recompiles']} "
        f"recompiles, {result['late_frames']} frames), graph breaks {result['breaks']}, "
        f"recompile-limit hits {result['limit_hits']}"
    )
    print(f"  first recompile reason: {result['reason']}")
    print(
        f"  max abs diff vs eager: read states {d_out:.3g} (max |state| {top_out:.3g}); "
        f"LoRA grads {d_grad:.3g} (max |grad| {top_grad:.3g})"
    )
    if saving > 0:
        total = saving * updates * passes
        print(
            f"  per pass saving {1000 * saving:.1f} ms: break-even after "
            f"{result['compile_overhead'] / saving:.0f} passes; {updates} updates x {passes} "
            f"passes save {total:.0f} s against {result['compile_overhead']:.0f} s of compile"
        )
    else:
        print(f"  no per-pass saving ({1000 * saving:+.1f} ms): compiling costs, never repays")
    print(
        f"ratio: {result['name']} eager {1000 * result['eager']:.1f} ms / compiled "
        f"{1000 * result['compiled']:.1f} ms per pass = {result['ratio']:.3f} "
        f"(median of interleaved pairs; > 1: compiled faster); max abs diff states "
        f"{d_out:.3g}, grads {d_grad:.3g}"
    )


def build(args: argparse.Namespace, tiny: tempfile.TemporaryDirectory) -> tuple[Any, str, Any]:
    """``(algorithm, model description, config)``: POAD on the CPU preset, adapter seeded."""
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.models import init_tiny_model
    from agentbench_poad.rl.config import preset_for
    from agentbench_poad.rl.trainer import build_policy

    algorithm_class = get_algorithm("poad")
    overrides: dict[str, Any] = {"target_kl": None}  # every minibatch pass runs
    if args.smoke and not args.model:
        model = str(init_tiny_model(Path(tiny.name) / "tiny", seed=0, num_layers=4))
        described = "tiny random Llama (--smoke: 4 layers, hidden 64)"
    else:
        model, described = resolve_model(args.model, tiny, num_layers=4)
    if args.smoke:
        overrides.update(num_envs=2, rollout_length=4, epochs=1, num_minibatches=2, lora_layers=2)
    if args.lora_layers:
        overrides["lora_layers"] = args.lora_layers
    if args.epochs:
        overrides["epochs"] = args.epochs
    config_class = algorithm_class.config_class
    preset = preset_for(config_class, args.env, "mini")
    config = config_class.preset(preset, **overrides)
    policy = build_policy(config, model, seed=0)
    return algorithm_class(config, policy, seed=0), described, config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model (default: see above)")
    parser.add_argument("--env", default="Overcooked-TomatoSalad-v0")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved (eager, compiled)")
    parser.add_argument(
        "--variants",
        default=None,
        help=f"comma-separated, of {','.join(VARIANTS)} (default: all; --smoke: layers-dyn)",
    )
    parser.add_argument("--cases", type=int, default=None, help="keep the first N passes only")
    parser.add_argument("--epochs", type=int, default=None, help="PPO epochs (default: preset)")
    parser.add_argument("--lora-layers", type=int, default=None, help="default: the preset's")
    parser.add_argument(
        "--cache-dir", default=None, help="inductor cache (default: a fresh temporary one)"
    )
    parser.add_argument("--updates", type=int, default=24, help="updates of a run (break-even)")
    parser.add_argument(
        "--passes",
        type=int,
        default=None,
        help="minibatch passes per update for the break-even (default: epochs x minibatches)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny random Llama, seconds")
    parser.add_argument(
        "--backend",
        default="inductor",
        help="torch.compile backend (inductor: the measured one; eager: dynamo's tracing only, "
        "no code generation: checks the plumbing in seconds)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cache = tempfile.TemporaryDirectory(prefix="inductor-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.cache_dir or cache.name
    variants = (args.variants or ("layers-dyn" if args.smoke else ",".join(VARIANTS))).split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    torch.manual_seed(0)

    tiny = tempfile.TemporaryDirectory()
    start = time.perf_counter()
    algorithm, described, config = build(args, tiny)
    policy = algorithm.policy
    buffer = collect_rollout(algorithm, args.env, config)
    cases = capture_cases(algorithm, buffer)
    if args.cases:
        cases = cases[: args.cases]
    setup = time.perf_counter() - start
    passes = args.passes or config.epochs * config.num_minibatches
    print(
        f"model: {described}; LoRA r={config.lora_r} on {','.join(config.lora_target_modules)} "
        f"of the top {config.lora_layers} layers; threads {torch.get_num_threads()}; "
        f"torch {torch.__version__}"
    )
    print(
        f"cases: {len(cases)} scoring passes of one update ({config.num_envs} envs x "
        f"{config.rollout_length} steps, {config.epochs} epochs x {config.num_minibatches} "
        f"minibatches; {args.env}); rows x width / read slots: "
        f"{' '.join(c.shape() for c in cases)} (setup {setup:.0f} s)"
    )
    if not cases:
        print("no scoring pass with gradients was recorded: nothing to time")
        return 1

    policy.model.train()  # as in the update (LoRA dropout is 0: the same numbers)
    eager = Runner(policy)
    eager.run_pass(cases)  # warm-up (lazy initialisation), not timed
    eager_pass = eager.run_pass(cases)
    print(
        f"eager: {1000 * eager_pass / len(cases):.1f} ms per pass ({eager_pass:.2f} s over the "
        f"{len(cases)} cases)"
    )
    problem = inductor_problem() if args.backend == "inductor" else None
    if problem is not None:
        print(f"inductor unavailable: {problem}")
        return 0
    for name in variants:
        try:
            result = probe_variant(
                name, policy, eager, cases, args.repeats, eager_pass, args.backend
            )
        except Exception as error:  # noqa: BLE001 - report and go on with the next variant
            line = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            print(f"\n[{name}] failed to compile or run: {line}")
            continue
        report(result, args.updates, passes)
    torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
