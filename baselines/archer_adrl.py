"""ARCHER-ADRL: the paper's "ARCHER" baseline as the paper's code ran it.

The paper compares POAD with NTPO, TWOSOME and a fourth method it calls ARCHER. Its code does not
implement the published ArCHer (Zhou et al., 2024: an off-policy hierarchical actor-critic with
an utterance-level Q/V critic and a replay buffer; ``archer`` on this board). Its "ARCHER" is
on-policy token-level PPO, NTPO in everything (token critic, token-level PPO, same rollouts, same
per-family hyper-parameters: the paper's rebuttal ran ARCHER with NTPO-like settings) except one
number, the bootstrap target at an action's last token (docs/reference.md#advantages):

* inner tokens as NTPO: ``δ = γ V_t^{j+1} − V_t^j``, and ``γλ`` between tokens;
* the last token bootstraps from ``V_{t+1}^{n_{t+1}}``, the value before the **last** token of the
  next action, where POAD and NTPO use ``V_{t+1}^1``, the value before its first token:
  ``δ = r_t + γ m_{t+1} V_{t+1}^{n_{t+1}} − V_t^{n_t}``; the advantage that crosses the boundary
  is still the next action's first-token advantage, ``A_t^{n_t} = δ + γλ m_{t+1} A_{t+1}^1``;
* the last rollout step of each environment has no next action in the buffer: it bootstraps from
  ``V_T^1``, the value before the first token of the next observation (the reference's choice);
* an episode's end (``m_{t+1} = 0``) stops the bootstrap and the advantage, as for POAD and NTPO;
* a time-limit truncation has no next action either (the env was reset): its target
  bootstraps from the value before the first token of the observation the limit cut it at, like
  the last rollout step, and the advantage stops there (as POAD's and NTPO's truncations do; the
  reference treats every time limit as terminal, docs/reference.md#deviations).

Where every action is one token the two bootstraps are the same number, and ARCHER-ADRL is NTPO
exactly (tests/test_archer_adrl_advantages.py checks that, and that they differ exactly where
the next action has more than one token).

The paper's code wired this backup for VirtualHome only: its Overcooked runner raised
``NotImplementedError`` for it, and its code-environment buffer had no branch for it, so there
it fell through to NTPO. Here it runs on every restricted-action env (Overcooked, VirtualHome)
and on open actions (DataSciCoding), with the boundary bootstrap everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentbench_poad.baselines.ntpo import NTPO, NTPOConfig

__all__ = ["ArcherADRL", "ArcherADRLConfig"]


@dataclass
class ArcherADRLConfig(NTPOConfig):
    """ARCHER-ADRL hyper-parameters: NTPO's fields and presets (every field documented on
    :class:`~agentbench_poad.rl.config.PPOConfig`; ``intra_gamma`` on
    :class:`~agentbench_poad.baselines.ntpo.NTPOConfig`).

    Presets (``ArcherADRLConfig.preset(family)``): NTPO's, Appendix J tables 11 (Overcooked), 14
    (VirtualHome) and 17 (DataSciCoding); the paper publishes no table for ARCHER, and its
    rebuttal ran it with NTPO-like settings. ``--preset mini`` applies the CPU preset of the
    family on top, as for every agent.
    """


class ArcherADRL(NTPO):
    """NTPO with the action-boundary bootstrap from the next action's last-token value."""

    name = "archer-adrl"
    config_class = ArcherADRLConfig

    def boundary_bootstrap(self) -> str:
        """ARCHER-ADRL's only change from NTPO: an action's last token bootstraps from
        ``V_{t+1}^{n_{t+1}}``, the value before the next action's *last* token. POAD's
        ``compute_advantages`` passes it to ``token_level_gae`` (``boundary="last"``), where
        ``buffer.next_values`` serves each environment's last rollout step and
        ``buffer.final_values()`` a time-limit truncation: no next action exists there.
        """
        return "last"
