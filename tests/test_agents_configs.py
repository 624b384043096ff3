"""Agent configs: the paper's presets (Appendix J), validation, registry."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from agentbench_poad.baselines import ALGORITHMS, get_algorithm  # noqa: E402
from agentbench_poad.baselines.ntpo import NTPO, NTPOConfig  # noqa: E402
from agentbench_poad.baselines.poad import POAD, POADConfig  # noqa: E402
from agentbench_poad.baselines.twosome import TWOSOME, TWOSOMEConfig  # noqa: E402
from agentbench_poad.rl.config import family_of  # noqa: E402

# (config, family) -> (lr, critic_lr, gamma, epochs, minibatches, entropy), the paper's Appendix J, Tables 10-17; docs/reference.md#presets
TABLES = {
    (POADConfig, "overcooked"): (5e-7, 1e-5, 0.99, 5, 2, 0.01),
    (NTPOConfig, "overcooked"): (5e-7, 1e-5, 0.99, 5, 4, 0.01),
    (TWOSOMEConfig, "overcooked"): (5e-7, 1e-5, 0.99, 1, 4, 0.01),
    (POADConfig, "virtualhome"): (1e-6, 5e-5, 0.95, 5, 2, 1e-4),
    (NTPOConfig, "virtualhome"): (1e-6, 5e-5, 0.95, 5, 2, 0.01),
    (TWOSOMEConfig, "virtualhome"): (1e-6, 5e-5, 0.95, 1, 4, 0.01),
    (POADConfig, "datascicoding"): (1e-6, 5e-5, 0.95, 1, 4, 0.01),
    (NTPOConfig, "datascicoding"): (1e-6, 5e-5, 0.95, 1, 4, 0.01),
}


@pytest.mark.parametrize(("config_class", "family"), list(TABLES))
def test_presets_are_appendix_j(config_class, family):
    config = config_class.preset(family)
    lr, critic_lr, gamma, epochs, minibatches, entropy = TABLES[(config_class, family)]
    assert (config.lr, config.critic_lr, config.gamma) == (lr, critic_lr, gamma)
    assert (config.epochs, config.num_minibatches, config.entropy_coef) == (
        epochs,
        minibatches,
        entropy,
    )
    # shared by every table: batch 128 from 4 envs, grad-norm 0.5, clip 0.2, vf 0.5, KL 0.02
    assert config.batch_size == 128 and config.num_envs == 4
    assert (config.max_grad_norm, config.clip, config.value_coef, config.target_kl) == (
        0.5,
        0.2,
        0.5,
        0.02,
    )


def test_preset_overrides_and_defaults():
    config = POADConfig.preset("overcooked", lr=1e-4, num_envs=2)
    assert config.lr == 1e-4 and config.num_envs == 2 and config.gamma == 0.99
    assert POADConfig.preset(None) == POADConfig()
    with pytest.raises(ValueError, match="unknown preset"):
        POADConfig.preset("atari")


@pytest.mark.parametrize("config_class", [POADConfig, NTPOConfig, TWOSOMEConfig])
@pytest.mark.parametrize("family", ["overcooked", "virtualhome", "datascicoding"])
def test_mini_preset_is_the_paper_preset_with_the_cpu_values_on_top(config_class, family):
    from agentbench_poad.rl.config import MINI_PRESETS, preset_names

    if family in config_class.UNSUPPORTED:
        with pytest.raises(ValueError, match="POAD or NTPO"):
            config_class.preset(f"{family}-mini")
        return
    paper, mini = config_class.preset(family), config_class.preset(f"{family}-mini")
    for name, value in vars(paper).items():
        expected = MINI_PRESETS[family].get(name, value)
        if isinstance(expected, list | tuple):
            expected = tuple(expected)
        assert getattr(mini, name) == expected, name
    # one CPU budget for every algorithm: the comparison stays fair
    assert (
        mini.batch_size == MINI_PRESETS[family]["num_envs"] * MINI_PRESETS[family]["rollout_length"]
    )
    assert f"{family}-mini" in preset_names(config_class)
    assert config_class.preset(f"{family}-mini", lr=1e-5).lr == 1e-5  # overrides still win
    with pytest.raises(ValueError, match=f"{family}-mini"):
        config_class.preset("atari-mini")


def test_train_resolves_mini_and_auto_from_the_env_family():
    from agentbench_poad.rl.trainer import _algorithm_config

    config, name = _algorithm_config(POAD, "Overcooked-TomatoSalad-v0", "mini", {})
    assert name == "overcooked-mini" and config == POADConfig.preset("overcooked-mini")
    config, name = _algorithm_config(POAD, "VirtualHome-Cheese-v0", "auto", {"lr": 2e-6})
    assert name == "virtualhome" and config.lr == 2e-6
    config, name = _algorithm_config(POAD, "CaseStudy-MicrowaveClose-v0", "mini", {})
    assert name is None and config == POADConfig()  # no family preset: plain defaults
    with pytest.raises(ValueError, match="POAD or NTPO"):
        _algorithm_config(TWOSOME, "DataSciCoding-iris-v0", "mini", {})


def test_twosome_refuses_open_action_envs():
    with pytest.raises(ValueError, match="POAD or NTPO"):
        TWOSOMEConfig.preset("datascicoding")
    assert not TWOSOME.supports_open_actions and POAD.supports_open_actions
    assert NTPO.supports_open_actions


@pytest.mark.parametrize(
    "bad",
    [
        {"lr": 0.0},
        {"gamma": 1.5},
        {"lam": -0.1},
        {"epochs": 0},
        {"num_minibatches": 2.5},
        {"normalization": "chars"},
        {"target_kl": -1.0},
        {"entropy_coef": -0.1},
        {"num_envs": 1, "rollout_length": 2, "num_minibatches": 3},
        {"dtype": "int8"},
    ],
)
def test_validation(bad):
    with pytest.raises(ValueError):
        POADConfig(**bad)


def test_round_trip_and_cli_overrides():
    config = NTPOConfig.preset("virtualhome", critic_hidden_sizes=(8, 4))
    assert NTPOConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown"):
        NTPOConfig.from_dict({"learning_rate": 1.0})
    parsed = NTPOConfig.coerce_overrides(
        {
            "lr": "1e-5",
            "epochs": "3",
            "target_kl": "none",
            "normalize_advantages": "false",
            "critic_hidden_sizes": "16,8",
            "lora_target_modules": "q_proj,k_proj",
            "normalization": "token",
        }
    )
    assert parsed == {
        "lr": 1e-5,
        "epochs": 3,
        "target_kl": None,
        "normalize_advantages": False,
        "critic_hidden_sizes": (16, 8),
        "lora_target_modules": ("q_proj", "k_proj"),
        "normalization": "token",
    }
    with pytest.raises(ValueError, match="unknown"):
        NTPOConfig.coerce_overrides({"nope": "1"})


def test_registry():
    assert set(ALGORITHMS) == {"poad", "ntpo", "twosome", "grpo", "gigpo", "archer-adrl", "archer"}
    assert get_algorithm("POAD") is POAD and get_algorithm("ntpo") is NTPO
    assert get_algorithm("twosome") is TWOSOME
    for name in ALGORITHMS:
        cls = get_algorithm(name)
        # the config class is named after the agent (ArcherADRLConfig for archer-adrl)
        prefix = name.replace("-", "").upper()
        assert cls.name == name and cls.config_class.__name__.upper().startswith(prefix)
    with pytest.raises(KeyError, match="choose one of"):
        get_algorithm("sarsa")


def test_family_of():
    assert family_of("Overcooked-TomatoSalad-v0") == "overcooked"
    assert family_of("VirtualHome-Cheese-v0") == "virtualhome"
    assert family_of("DataSciCoding-airlines-v0") == "datascicoding"
    assert family_of("CaseStudy-Microwave-v0") is None


def test_shared_machinery_never_asks_which_algorithm_runs():
    """The trainer and the shared rl/ code call methods; they never compare algorithm names."""
    import inspect
    import re

    from agentbench_poad.rl import advantages, buffer, config, group_rollout, ppo, trainer

    pattern = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'](poad|ntpo|twosome|grpo|gigpo)["']""", re.I)
    for module in (advantages, buffer, config, ppo, trainer, group_rollout):
        assert not pattern.search(inspect.getsource(module)), module.__name__


def test_ntpo_gamma_w_defaults_to_gamma_and_can_be_set_for_the_ablation():
    from types import SimpleNamespace

    config = NTPOConfig.preset("overcooked")
    assert NTPO.intra_gamma(SimpleNamespace(config=config)) == config.gamma == 0.99
    ablation = NTPOConfig.preset("overcooked", intra_gamma=0.9)
    assert NTPO.intra_gamma(SimpleNamespace(config=ablation)) == 0.9 and ablation.gamma == 0.99
    assert NTPOConfig.coerce_overrides({"intra_gamma": "0.95"}) == {"intra_gamma": 0.95}
    with pytest.raises(ValueError, match="intra_gamma"):
        NTPOConfig(intra_gamma=1.5)


def test_ppo_settings_defaults_agree_with_the_config_they_are_filled_from():
    """``PPOSettings`` repeats a subset of ``PPOConfig``'s fields with their own defaults.

    Code that builds a ``PPOSettings`` directly (tests, benchmarks, the critic probe) must get
    the same update as an agent built from a default config, so a default changed in one place
    (the reward-free rule, the clip, the KL guard) has to change in the other.
    """
    import dataclasses

    from agentbench_poad.rl.config import PPOConfig
    from agentbench_poad.rl.ppo_loop import PPOSettings

    config_defaults = {field.name: field.default for field in dataclasses.fields(PPOConfig)}
    settings_fields = dataclasses.fields(PPOSettings)
    assert settings_fields, "PPOSettings has no fields"
    missing = [field.name for field in settings_fields if field.name not in config_defaults]
    assert missing == [], f"PPOSettings fields that PPOConfig lacks: {missing}"
    disagree = {
        field.name: (field.default, config_defaults[field.name])
        for field in settings_fields
        if field.default != config_defaults[field.name]
    }
    assert disagree == {}, f"(PPOSettings, PPOConfig) defaults differ: {disagree}"
    # and a default config's settings are exactly the default settings
    assert PPOConfig().ppo_settings() == PPOSettings()
