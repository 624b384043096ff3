"""Supervised examples for a DataSciCoding warm start: the env's own prompt, a working body.

Each example pairs the reset observation of a *training* dataset's env (the prompt the agent
will read, in the chosen prompt style, through the policy's chat template when it uses one) with
a body from :func:`agentbench_poad.warmstart.programs.draw_programs`, ended as that style's stop
rule expects:

* ``paper``: the body alone (the prompt asks for "the function body only, without the final
  ``return model``"); the tokenizer's end-of-sequence token ends it.
* ``worked_example``: the prompt ends inside the body, already indented, so the completion is
  the body without its first indent, then ``return model`` (the style's stop rule cuts there).

Evaluation datasets are refused: a warm start that saw an evaluation prompt would measure
memory, not the agents (:data:`DEFAULT_TRAINING_DATASETS` holds none of the study's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentbench_poad.warmstart.programs import Program, draw_programs

#: The bundled datasets a warm start learns from by default: every bundled one except the
#: DataSciCoding group's evaluation datasets (``iris``, ``gen-xor``).
DEFAULT_TRAINING_DATASETS: tuple[str, ...] = (
    "wine",
    "breast-cancer",
    "gen-circles",
    "gen-moons",
    "gen-noisy",
)
STYLES = ("paper", "worked_example")


@dataclass(frozen=True)
class Example:
    """One supervised pair, and where it came from."""

    dataset: str
    prompt: str
    """The text the policy reads (chat-templated when the policy uses a template)."""
    completion: str
    program: Program


def completion_for(program: Program, style: str) -> str:
    """The text after the prompt that a working answer in ``style`` is."""
    if style == "paper":
        return program.body + "\n"
    if style == "worked_example":
        return program.body[4:] + "\n    return model\n"
    raise ValueError(f"unknown prompt style {style!r}; known: {', '.join(STYLES)}")


def build_examples(
    prompt_text: Callable[[str], str],
    *,
    style: str,
    programs_per_dataset: int,
    seed: int = 0,
    datasets: Sequence[str] = DEFAULT_TRAINING_DATASETS,
    evaluation_datasets: Sequence[str] = (),
) -> list[Example]:
    """Examples over ``datasets`` (each with its own draw of programs, seed ``seed + i``).

    ``prompt_text`` maps an observation to what the model reads (``LMPolicy.prompt_text``).
    A dataset that is also in ``evaluation_datasets`` is a ``ValueError`` naming it.
    """
    import gymnasium as gym

    import agentbench_poad  # noqa: F401 - registers the envs

    overlap = sorted(set(datasets) & set(evaluation_datasets))
    if overlap:
        raise ValueError(
            f"warm-start datasets {', '.join(overlap)} are evaluation datasets: a warm start must "
            "not see an evaluation prompt; leave them out of --datasets"
        )
    completion_for(draw_programs(1, seed)[0], style)  # an unknown style fails before any env
    examples: list[Example] = []
    for index, dataset in enumerate(datasets):
        env = gym.make(f"DataSciCoding-{dataset}-v0", prompt_style=style, sandbox="process")
        try:
            observation, _ = env.reset(seed=0)
        finally:
            env.close()
        prompt = prompt_text(observation)
        for program in draw_programs(programs_per_dataset, seed + index):
            examples.append(Example(dataset, prompt, completion_for(program, style), program))
    return examples
