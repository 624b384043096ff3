"""The agents a study spec names: which ones it trains (a built-in algorithm by name, a user's
:class:`~agentbench_poad.rl.ppo.PPOAgent` subclass by class spec), how a training cell names
them, and whether an evaluation-only agent spec can be built. Only a run imports the code a spec
names (a file, or a module outside the package's own agents); ``study --dry-run`` and
``--files`` leave it unimported (:func:`runs_named_code`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SpecAgents", "cell_agent", "check_agent_spec", "runs_named_code", "spec_agents"]

#: The package's own agents (a top-level name of an ``agentbench_poad.baselines`` module, e.g.
#: the random agent or an oracle): package code, imported to check a spec like a built-in name.
_PACKAGE_AGENT = re.compile(r"^agentbench_poad\.baselines\.[a-z_][a-z0-9_]*:[A-Za-z][A-Za-z0-9_]*$")


def runs_named_code(spec: str) -> bool:
    """Whether resolving the agent ``spec`` imports code the spec names: a file
    (``path/to/file.py:Class``) or a module (``module:Factory``) other than the package's own
    agents. A built-in name and ``lm:MODEL`` import package code only."""
    return ":" in spec and not spec.startswith("lm:") and not _PACKAGE_AGENT.match(spec)


@dataclass(frozen=True)
class SpecAgents:
    """What the agent specs of a study spec resolve to."""

    #: spec or name -> algorithm class (every built-in by name; a user's by spec and name)
    trainable: dict[str, Any]
    #: spec -> why it is unusable (it does not import, or it subclasses PPOAgent but is no
    #: complete algorithm)
    broken: dict[str, str] = field(default_factory=dict)
    #: specs of code left unimported (``import_code=False``): neither checked nor resolved
    unchecked: frozenset[str] = frozenset()


def spec_agents(
    specs: Sequence[str] = (), base: Path | None = None, *, import_code: bool = True
) -> SpecAgents:
    """The algorithms a spec may train: the built-in ones by name, and each class spec among
    ``specs`` (``"pkg.module:Class"``, ``"path/to/file.py:Class"``) that names a
    :class:`~agentbench_poad.rl.ppo.PPOAgent` subclass, by the spec as written and by its
    ``name``. A spec naming anything else is an evaluation-only agent (a prompted agent's
    factory). A file path is read relative to the current directory, else to ``base`` (the
    study spec's folder).

    Args:
        specs: the agent specs the study spec names (its groups' and its tuning's).
        base: the study spec's folder.
        import_code: False: import no code a spec names (:func:`runs_named_code`); such specs
            are :attr:`SpecAgents.unchecked`, whether they train or only evaluate unknown.
    """
    from agentbench_poad.baselines import ALGORITHMS, get_algorithm
    from agentbench_poad.rl.algorithm import (
        AlgorithmError,
        NotAnAlgorithm,
        is_algorithm_spec,
        load_algorithm,
        normalize_spec,
    )

    trainable: dict[str, Any] = {name: get_algorithm(name) for name in ALGORITHMS}
    broken: dict[str, str] = {}
    unchecked: set[str] = set()
    for spec in dict.fromkeys(s for s in specs if isinstance(s, str)):
        if spec.lower() in ALGORITHMS or not is_algorithm_spec(spec):
            continue
        if not import_code and runs_named_code(spec):
            unchecked.add(spec)
            continue
        resolved = normalize_spec(spec)
        file = resolved.rpartition(":")[0]
        if resolved != spec and base is not None and not Path(file).exists():
            resolved = normalize_spec(spec, base)
        try:
            algorithm = load_algorithm(resolved, reserved=ALGORITHMS)
        except NotAnAlgorithm:
            continue  # an evaluation-only agent
        except AlgorithmError as exc:
            broken[spec] = str(exc)
            continue
        other = trainable.get(algorithm.name)
        if other is not None and cell_agent(other) != cell_agent(algorithm):
            broken[spec] = (
                f"its name {algorithm.name!r} is also the name of {cell_agent(other)!r}; "
                "algorithms in one study need distinct names (they name runs and board rows)"
            )
            continue
        trainable[spec] = trainable[algorithm.name] = algorithm
    return SpecAgents(trainable, broken, frozenset(unchecked))


def cell_agent(algorithm: Any) -> str:
    """How a training cell names its algorithm: a built-in by name, a user's algorithm by the
    spec that loads it from any directory (a file path made absolute)."""
    from agentbench_poad.baselines import ALGORITHMS, get_algorithm
    from agentbench_poad.rl.algorithm import loaded_spec

    name = str(algorithm.name)
    if name in ALGORITHMS and get_algorithm(name) is algorithm:
        return name
    return loaded_spec(algorithm) or name


def check_agent_spec(spec: str) -> str | None:
    """None when ``spec`` names an agent the evaluation can build, else why not."""
    from agentbench_poad.agents import load_factory

    try:
        load_factory(spec)
    except (ValueError, ImportError) as exc:
        return str(exc)
