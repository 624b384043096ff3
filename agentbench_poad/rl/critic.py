"""Value heads on top of the frozen language model's features (docs/reference.md#models-and-critic).

The critic reads :meth:`agentbench_poad.rl.policy.LMPolicy.critic_features` -- last-layer hidden
states of the pre-trained model with the LoRA adapter disabled, in float32 -- and maps them to
values with a small MLP: ``Linear(H -> 1024, no bias) -> ReLU -> Linear(1024 -> 512, no bias) ->
ReLU -> Linear(512 -> 1, no bias)``. Only the head learns.

* :class:`TokenCritic` (POAD, NTPO) gives one value per feature position: for a step with action
  tokens ``w^1..w^n`` the value before token ``j`` is ``values[:, j - 1]`` and the bootstrap value
  of the next observation is ``values[:, 0]`` of its prompt-only features.
* :class:`ActionCritic` (TWOSOME) gives one value per prompt, read at the prompt's last real
  token (deviation docs/reference.md#deviations: the reference read a pad position).
* :class:`TargetCritic` is an optional Polyak-averaged copy (the paper's Eq. 15 target network);
  the reference code does not use one, and the agents default to none.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from torch import nn


class ValueHead(nn.Module):
    """Bias-free MLP ``H -> hidden_sizes... -> 1`` with ReLUs, in float32.

    Args:
        hidden_size: Width of the input features (the LM's hidden size).
        hidden_sizes: Widths of the hidden layers (the reference's ``(1024, 512)``).
        generator: Draws the initial weights (PyTorch's default ``Linear`` init) from this
            generator instead of the global RNG, so a seeded run builds the same head.
    """

    def __init__(
        self,
        hidden_size: int,
        hidden_sizes: Sequence[int] = (1024, 512),
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if hidden_size < 1 or any(h < 1 for h in hidden_sizes):
            raise ValueError(
                f"ValueHead sizes must be positive, got hidden_size={hidden_size}, "
                f"hidden_sizes={tuple(hidden_sizes)}"
            )
        widths = [int(hidden_size), *(int(h) for h in hidden_sizes), 1]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            layers.append(nn.Linear(fan_in, fan_out, bias=False, dtype=torch.float32))
            if i < len(widths) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        if generator is not None:
            with torch.no_grad():
                for layer in self.net:
                    if isinstance(layer, nn.Linear):
                        # Same distribution as nn.Linear's default (kaiming uniform, a=sqrt(5)).
                        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Values of shape ``features.shape[:-1]`` (the last axis is consumed)."""
        return self.net(features.float()).squeeze(-1)

    @torch.no_grad()
    def active_units(self, features: torch.Tensor) -> tuple[int, int]:
        """``(alive, total)`` of the first hidden layer: units positive on at least one row.

        A bias-free ReLU unit that is zero on every input gets no gradient and never comes back;
        a head whose units all die outputs 0 everywhere. ``features``: ``(B, H)``.
        """
        if len(self.net) < 2:  # no hidden layer: nothing can die
            return 0, 0
        hidden = self.net[1](self.net[0](features.float()))
        return int((hidden > 0).any(dim=0).sum()), int(hidden.shape[-1])


class _HeadCritic(nn.Module):
    """A :class:`ValueHead` on frozen LM features; subclasses choose which positions it reads.

    Args:
        hidden_size: The LM's hidden size.
        hidden_sizes: Hidden widths of the head.
        generator: Seeds the head's initial weights (see :class:`ValueHead`).
    """

    def __init__(
        self,
        hidden_size: int,
        hidden_sizes: Sequence[int] = (1024, 512),
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.head = ValueHead(hidden_size, hidden_sizes, generator=generator)


class TokenCritic(_HeadCritic):
    """Token-level values: ``forward(features (B, L + 1, H)) -> values (B, L + 1)``.

    Args: as :class:`_HeadCritic`.
    """

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.ndim != 3:
            raise ValueError(
                f"TokenCritic expects features of shape (B, L + 1, H), got {tuple(features.shape)}"
            )
        return self.head(features)


class ActionCritic(_HeadCritic):
    """Action-level values: ``forward(features (B, 1, H) or (B, H)) -> values (B,)``.

    Args: as :class:`_HeadCritic`.
    """

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.ndim == 3:
            # critic_features(prompts) gives (B, 1, H); with action tokens, position 0 is
            # still the prompt's last real token.
            features = features[:, 0, :]
        if features.ndim != 2:
            raise ValueError(
                f"ActionCritic expects features of shape (B, 1, H) or (B, H), got "
                f"{tuple(features.shape)}"
            )
        return self.head(features)


class TargetCritic(nn.Module):
    """A frozen Polyak-averaged copy of a critic (target network, the paper's Eq. 15).

    Args:
        critic: The online critic to track.
        tau: Weight of the online parameters in each :meth:`update`
            (``target <- (1 - tau) * target + tau * online``); 1.0 copies.
    """

    def __init__(self, critic: nn.Module, tau: float = 0.005) -> None:
        super().__init__()
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"TargetCritic.tau must be in (0, 1], got {tau!r}")
        self.tau = float(tau)
        self.target = copy.deepcopy(critic)
        for param in self.target.parameters():
            param.requires_grad_(False)
        # Not a submodule: the online critic is owned (and saved) elsewhere.
        object.__setattr__(self, "_online", critic)

    @torch.no_grad()
    def update(self) -> None:
        """Move the target towards the online critic by ``tau``."""
        for target, online in zip(self.target.parameters(), self._online.parameters()):
            target.lerp_(online.detach(), self.tau)

    @torch.no_grad()
    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.target(features)


__all__ = ["ActionCritic", "TargetCritic", "TokenCritic", "ValueHead"]
