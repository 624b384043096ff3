"""A replay buffer of action-level transitions, for off-policy critics (``archer``).

Transitions are plain text and token ids, so a checkpoint stores them as columns (read back with
``torch.load(weights_only=True)``), each distinct text once. Sampling is uniform with replacement
from the buffer's own seeded generator, which the checkpoint saves: a resumed run draws the same
minibatches as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ReplayBuffer", "Transition", "pack_transitions", "unpack_transitions"]


@dataclass(frozen=True)
class Transition:
    """One action-level step of the replay buffer."""

    observation: str
    available_actions: tuple[str, ...] | None
    """The actions offered at ``observation`` (None: open actions); the V target's support."""
    action: str
    action_ids: tuple[int, ...]
    """The action's tokens as appended after the observation's."""
    reward: float
    next_observation: str | None
    """The observation after the action (where a time limit cut the episode: the one it cut
    at); None after a terminal state."""
    done: bool
    """A terminal state: nothing to bootstrap."""


def pack_transitions(items: Sequence[Transition]) -> dict[str, Any]:
    """Transitions as plain columns (checkpoints are read with ``weights_only=True``); each
    distinct text is stored once (observations repeat a lot)."""
    table: dict[str, int] = {}

    def ref(text: str | None) -> int:
        return -1 if text is None else table.setdefault(text, len(table))

    return {
        "observation": [ref(t.observation) for t in items],
        "available_actions": [
            None if t.available_actions is None else [ref(a) for a in t.available_actions]
            for t in items
        ],
        "action": [ref(t.action) for t in items],
        "action_ids": [list(t.action_ids) for t in items],
        "reward": [float(t.reward) for t in items],
        "next_observation": [ref(t.next_observation) for t in items],
        "done": [bool(t.done) for t in items],
        "texts": list(table),
    }


def unpack_transitions(packed: dict[str, Any]) -> list[Transition]:
    """Inverse of :func:`pack_transitions`."""
    texts = packed["texts"]

    def text(i: int) -> str | None:
        return None if i < 0 else texts[i]

    return [
        Transition(
            observation=texts[o],
            available_actions=None if offered is None else tuple(texts[a] for a in offered),
            action=texts[a],
            action_ids=tuple(int(x) for x in ids),
            reward=float(r),
            next_observation=text(n),
            done=bool(d),
        )
        for o, offered, a, ids, r, n, d in zip(
            packed["observation"],
            packed["available_actions"],
            packed["action"],
            packed["action_ids"],
            packed["reward"],
            packed["next_observation"],
            packed["done"],
        )
    ]


class ReplayBuffer:
    """A ring buffer of :class:`Transition` with seeded uniform sampling (with replacement).

    Args:
        capacity: transitions kept; the next one overwrites the oldest.
        seed: seeds the sampling generator (saved and restored with the buffer).
    """

    def __init__(self, capacity: int, seed: int) -> None:
        if capacity < 1:
            raise ValueError(f"ReplayBuffer capacity must be >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.items: list[Transition] = []
        self.inserted = 0
        self.generator = torch.Generator().manual_seed(int(seed))

    def __len__(self) -> int:
        return len(self.items)

    def add(self, transition: Transition) -> None:
        if len(self.items) < self.capacity:
            self.items.append(transition)
        else:
            self.items[self.inserted % self.capacity] = transition
        self.inserted += 1

    def sample_indices(self, size: int) -> list[int]:
        """``size`` positions drawn uniformly with replacement."""
        if not self.items:
            raise ValueError("cannot sample from an empty replay buffer")
        drawn = torch.randint(len(self.items), (int(size),), generator=self.generator)
        return drawn.tolist()

    def sample(self, size: int) -> list[Transition]:
        return [self.items[i] for i in self.sample_indices(size)]

    def state_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "inserted": self.inserted,
            "transitions": pack_transitions(self.items),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"the checkpoint's replay buffer holds {state['capacity']} transitions, this "
                f"run's {self.capacity}: resume with the run's own replay_capacity"
            )
        self.items = unpack_transitions(state["transitions"])
        self.inserted = int(state["inserted"])
        self.generator.set_state(state["generator"].cpu())
