"""Registration of the package's ids with gymnasium, and the one source of facts about an id.

Gymnasium 1.x practice, as Minigrid and Gymnasium itself do it: importing the package registers
every id (``import agentbench_poad``, or ``gym.make("agentbench_poad:<id>")``, which makes
gymnasium import the package first). Each family calls :func:`register_family` once with its
:class:`EnvFamily` (entry point, version, metric, success rule, protocol discount) and its tasks
as rows (:class:`TaskRow`: the entry point's ``kwargs`` plus the paper facts); nothing is patched
in gymnasium and nothing runs at ``import gymnasium``.

:func:`env_facts` answers "which family, task, version, metric, discount ... is this id?" from
what :func:`register_family` recorded, so no caller splits id strings.

This module imports gymnasium and nothing heavy: families pass their task tables in; engines are
imported by gymnasium only when an env is made.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import gymnasium as gym

__all__ = [
    "EnvFacts",
    "EnvFamily",
    "TaskRow",
    "UnknownEnvError",
    "env_facts",
    "family_of_env",
    "paper_layout",
    "register_envs",
    "register_family",
    "registered_ids",
]

#: Modules whose ``register_envs()`` registers a family (each imports only its task table).
FAMILY_MODULES: tuple[str, ...] = (
    "agentbench_poad.environments.overcooked.registration",
    "agentbench_poad.environments.virtualhome.registration",
    "agentbench_poad.environments.datascicoding.registration",
    "agentbench_poad.rl.toy",
)

#: The benchmark families (``agentbench-poad envs`` lists these; the case-study toys are not).
BENCHMARK_FAMILIES: tuple[str, ...] = ("overcooked", "virtualhome", "datascicoding")

#: The leaderboard's default success rule of restricted-action envs (written into every record;
#: VirtualHome's). A family with a sharper rule states its own: Overcooked's is "right dish
#: delivered (info['success'])" (``environments/overcooked/registration.py``).
SUCCESS_RESTRICTED = "info['success'] if reported, else return > 0"
#: The leaderboard's success rule of open-action (code-writing) envs.
SUCCESS_OPEN = "final code ran (reward >= 0)"


class UnknownEnvError(KeyError):
    """An id that is not registered with gymnasium at all."""

    def __str__(self) -> str:  # KeyError would print the message with quotes
        return str(self.args[0])


@dataclass(frozen=True)
class EnvFamily:
    """What every id of one family shares.

    Attributes:
        name: the family's name (``"overcooked"``), as records and presets use it.
        id_prefix: the first part of its ids: ``<id_prefix>-<task>-v<version>``.
        entry_point: ``"module:Class"`` (or a callable) that gymnasium builds.
        version: the ``-vN`` of every id; bump it when behaviour changes.
        actions: ``"restricted"`` (``info["available_actions"]`` is a list) or ``"open"``
            (generated text; ``available_actions`` is None).
        metric: the leaderboard's episode score: ``"return"`` (episodic return) or
            ``"final_auc"`` (the reward of the final step: DataSciCoding's final-code ROC AUC).
        success_rule: how the leaderboard decides that an episode succeeded (record text).
        discount: the evaluation protocol's discount γ of the family: records log each
            episode's discounted return ``sum_t γ^t r_t`` over decisions (one ``env.step`` per
            agent action). It is the γ of the family's paper preset (Appendix J), which the
            agents' presets read from here. None: the family has no protocol discount (records
            then log no discounted return).
    """

    name: str
    id_prefix: str
    entry_point: str | Callable[..., gym.Env]
    version: int = 0
    actions: Literal["restricted", "open"] = "restricted"
    metric: Literal["return", "final_auc"] = "return"
    success_rule: str = SUCCESS_RESTRICTED
    discount: float | None = None

    def __post_init__(self) -> None:
        if self.actions not in ("restricted", "open"):
            raise ValueError(f"actions must be 'restricted' or 'open', got {self.actions!r}")
        if self.metric not in ("return", "final_auc"):
            raise ValueError(f"metric must be 'return' or 'final_auc', got {self.metric!r}")
        if not isinstance(self.version, int) or self.version < 0:
            raise ValueError(f"version must be an int >= 0, got {self.version!r}")
        if self.discount is not None and (
            isinstance(self.discount, bool)
            or not isinstance(self.discount, int | float)
            or not 0.0 <= self.discount <= 1.0
        ):
            raise ValueError(f"discount must be a number in [0, 1] or None, got {self.discount!r}")
        if "-" in self.id_prefix or not self.id_prefix:
            raise ValueError(
                f"id_prefix must be a non-empty word without '-', got {self.id_prefix!r}"
            )


@dataclass(frozen=True)
class TaskRow:
    """One task of a family: one registered id.

    Attributes:
        name: the task part of the id (``"TomatoSalad"``, ``"airlines"``).
        kwargs: the entry point's keyword arguments that select the task.
        description: one line for ``agentbench-poad envs``.
        max_episode_steps: the ``TimeLimit`` of the registration (None: the env's own rule).
        paper_name: the task's name in the POAD paper, or None when the paper has no such task.
        paper_tables: the paper's tables that list the task (``("Table 1",)``); rows are
            registered in the order of those tables (see :func:`paper_layout`).
    """

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    description: str = ""
    max_episode_steps: int | None = None
    paper_name: str | None = None
    paper_tables: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvFacts:
    """The facts of one registered id (see :func:`env_facts`).

    Attributes:
        env_id: the id.
        family: ``"overcooked"``, ``"virtualhome"``, ``"datascicoding"``, ``"casestudy"``, or
            the family another package registered with :func:`register_family`; for an id
            registered without it, its gymnasium namespace or ``"external"``.
        task: the task part of the id (the row name of the family's task table).
        version: the id's ``-vN`` (from gymnasium's spec).
        actions: ``"restricted"``, ``"open"``, or None when unknown (an external id).
        metric: ``"return"``, ``"final_auc"``, or None when unknown (an external id).
        success_rule: the leaderboard's success rule (record text), or None when unknown.
        paper_name: the task's name in the paper, or None.
        paper_tables: the paper's tables that list the task.
        description: the one-line description (``agentbench-poad envs``).
        entry_point: the registered entry point.
        kwargs: the registered keyword arguments (read-only).
        max_episode_steps: the registered time limit, or None.
        registered_by_family: True for ids registered through :func:`register_family`.
        discount: the evaluation protocol's discount γ (:attr:`EnvFamily.discount`), or None
            when the family has none or is unknown (an external id).
    """

    env_id: str
    family: str
    task: str
    version: int
    actions: Literal["restricted", "open"] | None
    metric: Literal["return", "final_auc"] | None
    success_rule: str | None
    paper_name: str | None = None
    paper_tables: tuple[str, ...] = ()
    description: str = ""
    entry_point: str | Callable[..., gym.Env] | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    max_episode_steps: int | None = None
    registered_by_family: bool = True
    discount: float | None = None

    @property
    def open_action(self) -> bool | None:
        """True for open-action envs, False for restricted ones, None when unknown."""
        return None if self.actions is None else self.actions == "open"

    @property
    def in_paper(self) -> bool:
        """Whether the POAD paper has this task."""
        return self.paper_name is not None


#: env id -> facts, written by register_family (the single source of env facts).
_FACTS: dict[str, EnvFacts] = {}


def _recorded(env_id: str) -> EnvFacts | None:
    """The recorded facts of ``env_id`` while gymnasium still holds the registration they describe.

    An id removed from ``gym.registry``, or registered again by someone else with another entry
    point or kwargs, is no longer described by what :func:`register_family` recorded.
    """
    facts = _FACTS.get(env_id)
    spec = gym.registry.get(env_id)
    if facts is None or spec is None:
        return None
    if spec.entry_point != facts.entry_point or spec.kwargs != dict(facts.kwargs):
        return None
    return facts


def register_family(family: EnvFamily, tasks: Iterable[TaskRow]) -> tuple[str, ...]:
    """Register one id per task row with gymnasium and record its facts.

    Idempotent: an id already registered with the same entry point, kwargs and time limit is left
    alone (no gymnasium "overriding" warning), so importing twice or calling again is harmless.

    Args:
        family: what the family's ids share.
        tasks: the task table, one row per id.

    Returns:
        The ids of the rows, in row order.

    Raises:
        ValueError: two rows with the same name (nothing is registered then).
    """
    rows = list(tasks)
    ids = [f"{family.id_prefix}-{row.name}-v{family.version}" for row in rows]
    for env_id, row in zip(ids, rows):  # check the whole table before registering any of it
        if ids.count(env_id) > 1:
            raise ValueError(f"family {family.name!r} lists task {row.name!r} twice")
    for env_id, row in zip(ids, rows):
        kwargs = dict(row.kwargs)
        existing = gym.registry.get(env_id)
        if existing is None or not (
            existing.entry_point == family.entry_point
            and existing.kwargs == kwargs
            and existing.max_episode_steps == row.max_episode_steps
        ):
            gym.register(
                id=env_id,
                entry_point=family.entry_point,
                kwargs=kwargs,
                max_episode_steps=row.max_episode_steps,
            )
        _FACTS[env_id] = EnvFacts(
            env_id=env_id,
            family=family.name,
            task=row.name,
            version=family.version,
            actions=family.actions,
            metric=family.metric,
            success_rule=family.success_rule,
            paper_name=row.paper_name,
            paper_tables=tuple(row.paper_tables),
            description=row.description,
            entry_point=family.entry_point,
            kwargs=MappingProxyType(dict(kwargs)),
            max_episode_steps=row.max_episode_steps,
            discount=family.discount,
        )
    return tuple(ids)


def register_envs() -> None:
    """Register every id of the package (done by ``import agentbench_poad``; idempotent)."""
    for name in FAMILY_MODULES:
        importlib.import_module(name).register_envs()


def env_facts(env_id: str) -> EnvFacts:
    """The facts of a registered id: family, task, version, metric, success rule, paper facts.

    Ids registered with :func:`register_family` (every id of this package) answer from what the
    registration recorded. An id registered some other way (say a test's toy env, or
    ``FrozenLake-v1``) still gets facts from its gymnasium spec: its namespace (else
    ``"external"``) as family, its name as task, its version, and None where only the env
    can tell (actions, metric, success rule) or no family states it (the protocol discount).

    Args:
        env_id: a gymnasium id, with or without gymnasium's ``module:`` prefix.

    Raises:
        UnknownEnvError: the id is not registered (the message names the import that fixes it).
    """
    if ":" in env_id:  # gymnasium's "module:id" form: the module registers the id
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    facts = _recorded(env_id)
    if facts is not None:
        return facts
    spec = gym.registry.get(env_id)
    if spec is None:
        raise UnknownEnvError(
            f"{env_id!r} is not a registered gymnasium id; ids of agentbench-poad are "
            "registered by `import agentbench_poad` (see `agentbench-poad envs`), ids of other "
            "packages by importing that package"
        )
    return EnvFacts(
        env_id=env_id,
        family=spec.namespace or "external",
        task=spec.name,
        version=spec.version if spec.version is not None else 0,
        actions=None,
        metric=None,
        success_rule=None,
        entry_point=spec.entry_point,
        kwargs=MappingProxyType(dict(spec.kwargs)),
        max_episode_steps=spec.max_episode_steps,
        registered_by_family=False,
    )


def family_of_env(env: gym.Env) -> str | None:
    """The family of an env instance (any wrapper around it), or None when it is not ours.

    An env made by ``gym.make`` answers from its id's facts; one built by calling its class
    answers from the family whose registered entry point is that class.
    """
    spec = env.unwrapped.spec
    if spec is not None and (facts := _recorded(spec.id)) is not None:
        return facts.family
    cls = type(env.unwrapped)
    for facts in _FACTS.values():
        entry = facts.entry_point
        if entry is cls or entry == f"{cls.__module__}:{cls.__qualname__}":
            return facts.family
    return None


def registered_ids(family: str | None = None) -> list[str]:
    """The benchmark ids (of one family, or of every benchmark family), sorted.

    ``family`` may name any family registered with :func:`register_family` (``"casestudy"``
    lists the case-study toys, which the default leaves out).
    """
    wanted = BENCHMARK_FAMILIES if family is None else (family,)
    return sorted(
        env_id
        for env_id, facts in _FACTS.items()
        if facts.family in wanted and _recorded(env_id) is not None
    )


def paper_layout(table: str) -> tuple[str, ...]:
    """The registered ids of one of the paper's tables, in the table's order.

    E.g. ``paper_layout("Table 1")`` gives the VirtualHome ids of the generalisation table
    (Food Preparation, then its variants as columns) and ``paper_layout("Table 4")`` the
    DataSciCoding datasets of the paper's comparison with CAAFE (rows).
    """
    return tuple(
        env_id
        for env_id, facts in _FACTS.items()
        if table in facts.paper_tables and _recorded(env_id) is not None
    )
