"""Several scoring trees packed into a few rows, every shared prefix run once.

A *scoring tree* is a prompt followed by a trie of continuations (the offered actions, or the
actions a PPO minibatch chose): :meth:`~agentbench_poad.rl.action_scoring.ActionScoring._score_group`
reads the log-probabilities of every continuation from one forward over it. A PPO minibatch holds
a dozen such trees, and their prompts share long prefixes (an Overcooked observation starts with
the same sentence whatever the state: "There is a fixed cutting board in the room. ..."). In a
causal model a token's hidden states depend on its prefix only, so all the trees of a group form
one trie over token prefixes: each distinct prefix is one node, run once, and every tree reads
its tokens' states from the nodes of its own path.

:func:`build_forest` lays that trie out for one batched forward. Trees are sorted by their prompt
tokens (trees that share prefixes land next to each other) and packed in that order into rows of
at most ``row_tokens`` nodes (a tree is never split; one larger than the budget gets a row of its
own), as evenly as that many rows allow; each row is the trie of its trees, so no tree pays another's padding and a row's attention
covers its own nodes only. A node sees its ancestors and itself (the additive mask), and sits at
the position of its depth. One tree alone is laid out exactly as before: its prompt's tokens, then
its trie's nodes in order.

Exact: every real slot computes what one forward per prompt + continuation computes at that
token, to float rounding (the shapes of the batched products differ).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Forest", "build_forest"]

#: A tree: ``(tokens, parents, depths)`` of its trie's nodes (parent -1: follows the prompt).
Trie = tuple[list[int], list[int], list[int]]


@dataclass
class Forest:
    """The packed layout of several scoring trees (:func:`build_forest`).

    Attributes:
        ids: ``(R, W)`` token ids (``pad_id`` at unused slots).
        positions: ``(R, W)`` position of each slot (its depth; 0 at unused slots).
        allowed: ``(R, W, W)`` bool, True where a slot may attend to another (its ancestors and
            itself; an unused slot sees itself only).
        where: per tree, the ``(row, column)`` of each of its *elements*: its prompt's tokens,
            then its trie's nodes (the order of the tree cache's states).
        source: ``(R, W)`` long: for each slot, the index of the element (counted over all
            trees, tree after tree) whose states fill it; ``-1`` at unused slots.
    """

    ids: torch.Tensor
    positions: torch.Tensor
    allowed: torch.Tensor
    where: list[list[tuple[int, int]]]
    source: torch.Tensor

    def gather(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        """``(R, W, H)`` per-slot states from per-tree element states (zeros at unused slots).

        ``states[i]`` holds tree ``i``'s elements (prompt tokens, then trie nodes), one row each.
        A node shared by several trees takes its first tree's row (each equals the others to
        float rounding: the same prefix, computed in another layout).
        """
        flat = torch.cat([*states, states[0].new_zeros((1, states[0].shape[-1]))])
        index = self.source.to(flat.device)
        return flat[torch.where(index < 0, flat.shape[0] - 1, index)]

    def additive_mask(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """``(R, 1, W, W)`` additive attention mask: 0 where allowed, the dtype's minimum else."""
        mask = torch.zeros(self.allowed.shape, dtype=dtype)
        return mask.masked_fill(~self.allowed, torch.finfo(dtype).min)[:, None].to(device)


class _Row:
    """One row's trie: nodes keyed by (parent column, token)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.children: dict[tuple[int, int], int] = {}
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.source: list[int] = []

    @staticmethod
    def _paths(prompt: Sequence[int], trie: Trie) -> list[tuple[int, int, int]]:
        """``(parent element, token, depth)`` of each element of a tree, in element order."""
        n_p = len(prompt)
        tokens, parents, depths = trie
        return [(q - 1, int(t), q) for q, t in enumerate(prompt)] + [
            (n_p - 1 if parent < 0 else n_p + parent, int(token), n_p + depth)
            for token, parent, depth in zip(tokens, parents, depths)
        ]

    def new_nodes(self, prompt: Sequence[int], trie: Trie) -> int:
        """How many nodes adding the tree would create."""
        columns: list[int | None] = []
        count = 0
        for parent, token, _ in self._paths(prompt, trie):
            parent_column = -1 if parent < 0 else columns[parent]
            column = None if parent_column is None else self.children.get((parent_column, token))
            columns.append(column)
            count += column is None
        return count

    def add(self, prompt: Sequence[int], trie: Trie, first_element: int) -> list[int]:
        """Add a tree; the columns of its elements."""
        columns: list[int] = []
        for element, (parent, token, depth) in enumerate(self._paths(prompt, trie)):
            parent_column = -1 if parent < 0 else columns[parent]
            column = self.children.get((parent_column, token))
            if column is None:
                column = self.children[(parent_column, token)] = len(self.tokens)
                self.tokens.append(token)
                self.parents.append(parent_column)
                self.depths.append(depth)
                self.source.append(first_element + element)
            columns.append(column)
        return columns


def _pack(
    order: Sequence[int], prompt_ids: Sequence[Sequence[int]], tries: Sequence[Trie], budget: int
) -> tuple[list[_Row], list[list[int]]]:
    """Rows of consecutive trees (in ``order``) of nearly equal size, each within ``budget``.

    As many rows as the budget needs, then the smallest cap per row that still fits the trees in
    that many: rows of one forward are padded to the widest, so even rows pad least.
    """

    def fill(cap: int) -> tuple[list[_Row], list[list[int]]]:
        rows: list[_Row] = []
        members: list[list[int]] = []
        for i in order:
            if not rows or (
                rows[-1].tokens
                and len(rows[-1].tokens) + rows[-1].new_nodes(prompt_ids[i], tries[i]) > cap
            ):
                rows.append(_Row())
                members.append([])
            rows[-1].add(prompt_ids[i], tries[i], 0)
            members[-1].append(i)
        return rows, members

    packed = fill(budget)
    count = len(packed[0])
    largest = max(len(p) + len(t[0]) for p, t in zip(prompt_ids, tries))
    low, high = largest, max(budget, largest)
    while low < high:  # the smallest cap that needs no more rows than the budget did
        cap = (low + high) // 2
        trial = fill(cap)
        if len(trial[0]) <= count:
            packed, high = trial, cap
        else:
            low = cap + 1
    return packed


def build_forest(
    prompt_ids: Sequence[Sequence[int]],
    tries: Sequence[Trie],
    *,
    row_tokens: int,
    pad_id: int,
) -> Forest:
    """Pack scoring trees into rows of shared-prefix tries (see the module docstring).

    Args:
        prompt_ids: per tree, its prompt's token ids (non-empty).
        tries: per tree, its continuations' trie ``(tokens, parents, depths)`` (parent -1: the
            node follows the prompt's last token).
        row_tokens: a row holds at most this many nodes unless one tree alone needs more.
        pad_id: the token id of unused slots.
    """
    if len(prompt_ids) != len(tries):
        raise ValueError(f"got {len(prompt_ids)} prompts but {len(tries)} tries")
    first_element = np.cumsum([0] + [len(p) + len(t[0]) for p, t in zip(prompt_ids, tries)])
    order = sorted(range(len(prompt_ids)), key=lambda i: (list(prompt_ids[i]), i))
    rows, members = _pack(order, prompt_ids, tries, row_tokens)
    where: list[list[tuple[int, int]]] = [[] for _ in prompt_ids]
    for r, (row, trees) in enumerate(zip(rows, members)):
        row.clear()
        for i in trees:
            columns = row.add(prompt_ids[i], tries[i], int(first_element[i]))
            where[i] = [(r, c) for c in columns]
    width = max(len(row.tokens) for row in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    positions = np.zeros((len(rows), width), dtype=np.int64)
    source = np.full((len(rows), width), -1, dtype=np.int64)
    allowed = np.zeros((len(rows), width, width), dtype=bool)
    allowed[:, np.arange(width), np.arange(width)] = True
    for r, row in enumerate(rows):
        n = len(row.tokens)
        ids[r, :n] = row.tokens
        positions[r, :n] = row.depths
        source[r, :n] = row.source
        seen = allowed[r]
        for node, parent in enumerate(row.parents):  # parents come before their children
            if parent >= 0:
                seen[node, :node] |= seen[parent, :node]
    return Forest(
        ids=torch.from_numpy(ids),
        positions=torch.from_numpy(positions),
        allowed=torch.from_numpy(allowed),
        where=where,
        source=torch.from_numpy(source),
    )
