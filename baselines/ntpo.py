"""NTPO: naive token-level PPO, the paper's ablation of POAD.

Everything is POAD's (token critic, token-level PPO, same rollouts), except the credit
assignment: every token is treated as if it were an environment step, so the TD error of an inner
token is ``γ V^{j+1} − V^j`` and λ becomes ``γλ`` inside an action (docs/reference.md#advantages). The
reward, still given on the action's last token, reaches token ``j`` discounted by ``γ^{n−j}``:
earlier tokens (often the key word, "open" versus "close") get less credit than later ones, and
the token values no longer agree with the action-level values (the paper's Eq. 11-12;
tests/test_rl_advantages.py shows it on the case-study MDP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from agentbench_poad.baselines.poad import _COMMON, _GAMMA, POAD
from agentbench_poad.rl.config import PPOConfig

__all__ = ["NTPO", "NTPOConfig"]


@dataclass
class NTPOConfig(PPOConfig):
    """NTPO hyper-parameters (every field documented on :class:`PPOConfig`).

    Presets (``NTPOConfig.preset(family)``): Appendix J tables 11 (Overcooked), 14 (VirtualHome)
    and 17 (DataSciCoding).
    """

    intra_gamma: float | None = None
    """γ_w, the discount between the tokens of one action (the paper's Figure 5 ablation);
    None is NTPO as defined: γ_w = ``gamma``, every token discounted as an environment step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.intra_gamma is not None and not 0.0 <= self.intra_gamma <= 1.0:
            raise ValueError(
                f"intra_gamma must be in [0, 1] or None (= gamma), got {self.intra_gamma!r}"
            )

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "overcooked": {
            **_COMMON,
            "lr": 5e-7,
            "critic_lr": 1e-5,
            "gamma": _GAMMA["overcooked"],
            "entropy_coef": 0.01,
            "epochs": 5,
            "num_minibatches": 4,
        },
        "virtualhome": {
            **_COMMON,
            "lr": 1e-6,
            "critic_lr": 5e-5,
            "gamma": _GAMMA["virtualhome"],
            "entropy_coef": 0.01,
            "epochs": 5,
            "num_minibatches": 2,
        },
        "datascicoding": {
            **_COMMON,
            "lr": 1e-6,
            "critic_lr": 5e-5,
            "gamma": _GAMMA["datascicoding"],
            "entropy_coef": 0.01,
            "epochs": 1,
            "num_minibatches": 4,
            "max_new_tokens": 128,
        },
    }


class NTPO(POAD):
    """Token-level critic and PPO like POAD, with every token discounted as an env step."""

    name = "ntpo"
    config_class = NTPOConfig

    def intra_gamma(self) -> float:
        """Discount between the tokens of one action: γ (or ``config.intra_gamma``, γ_w).

        This is NTPO's only change: POAD's ``compute_advantages`` passes it to
        ``token_level_gae``, so inner tokens get ``δ = γ V^{j+1} − V^j`` and ``γλ``
        (docs/reference.md#advantages).
        """
        gamma_w = self.config.intra_gamma
        return self.config.gamma if gamma_w is None else gamma_w
