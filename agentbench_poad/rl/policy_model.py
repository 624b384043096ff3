"""The LM policy's model: loading, LoRA set-up, tokenisation, frozen lower layers, weights.

:class:`PolicyModel` is the base of :class:`~agentbench_poad.rl.policy.LMPolicy` (whose docstring
describes the constructor's arguments). It holds what every other part of the policy builds on:

* set-up -- the causal LM and tokenizer (:func:`~agentbench_poad.models.loading.load_causal_lm`),
  the LoRA adapters on every layer or on the top ``lora_layers`` only, or full fine-tuning with a
  frozen copy for the critic; the EOS and pad ids;
* model access -- the transformers model under peft, the frozen backbone (adapter disabled), a
  forward that computes only the logits it needs;
* frozen lower layers -- with ``lora_layers``, the decoder stack run over a slice of its layers,
  and the least-recently-used cache (:class:`_StateCache`) of the states entering the lowest
  adapted layer, which never change during training;
* tokenisation -- the prompt (optionally through the chat template) and restricted actions
  tokenized in context, right-padded batches;
* weights -- the trainable parameters, saving and loading the adapter.

The parts that use it: :mod:`agentbench_poad.rl.action_scoring` (restricted actions),
:mod:`agentbench_poad.rl.generation` (open actions), :mod:`agentbench_poad.rl.update_features`
(token log-probs and critic features for the update).
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from agentbench_poad.models.loading import LoraSettings, load_causal_lm, resolve_device
from agentbench_poad.rl.policy_types import NORMALIZATIONS, GenerationSettings


def _forward_accepts(model: torch.nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return False


def chat_prompt_text(tokenizer: Any, prompt: str) -> str:
    """``prompt`` as a user turn followed by the assistant header (what a policy with
    ``chat_template`` reads; also what a warm start trains on, agentbench_poad.warmstart)."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


class _StateCache:
    """Least-recently-used hidden states ``(T, H)`` under a budget of ``T`` summed over entries.

    An entry longer than the whole budget is not kept; putting a key that is present keeps the
    first value (the states of a key never change).
    """

    def __init__(self, budget: int) -> None:
        self.budget = int(budget)
        self.size = 0
        self._entries: OrderedDict[Any, torch.Tensor] = OrderedDict()

    def get(self, key: Any) -> torch.Tensor | None:
        states = self._entries.get(key)
        if states is not None:
            self._entries.move_to_end(key)
        return states

    def put(self, key: Any, states: torch.Tensor) -> None:
        rows = int(states.shape[0])
        if key in self._entries or rows > self.budget:
            return
        self._entries[key] = states.detach()
        self.size += rows
        while self.size > self.budget:
            _, old = self._entries.popitem(last=False)
            self.size -= int(old.shape[0])

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0

    def __contains__(self, key: Any) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Any]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class _AtRows(torch.nn.Module):
    """A position-wise module run at some rows of its input only, zeros at the others.

    For the top decoder layer of a pass that reads a few positions: its output elsewhere is
    never read, so its per-position parts (query and output projections, MLP) need not run there.
    """

    def __init__(self, inner: torch.nn.Module, rows: torch.Tensor) -> None:
        super().__init__()
        self.inner = inner
        self.rows = rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        picked = self.inner(flat[self.rows])
        out = picked.new_zeros((flat.shape[0], picked.shape[-1])).index_copy(0, self.rows, picked)
        return out.reshape(*x.shape[:-1], picked.shape[-1])


class PolicyModel(torch.nn.Module):
    """A causal LM (with LoRA by default), its tokenizer and the frozen-layer caches.

    The constructor's arguments are described on :class:`~agentbench_poad.rl.policy.LMPolicy`.
    """

    def __init__(
        self,
        model_name_or_path: str | Path,
        *,
        lora: LoraSettings | None = LoraSettings(),  # noqa: B008 - frozen-by-convention default
        dtype: Any = "float32",
        device: Any = "cpu",
        normalization: str = "word",
        generation: GenerationSettings | None = None,
        action_separator: str = " ",
        score_batch_tokens: int = 16384,
        lora_layers: int | None = None,
        frozen_cache_tokens: int = 262_144,
        chat_template: bool = False,
        compile_layers: bool = False,
    ) -> None:
        super().__init__()
        if normalization not in NORMALIZATIONS:
            raise ValueError(
                f"unknown normalization {normalization!r}; use one of {sorted(NORMALIZATIONS)}"
            )
        self.model_name_or_path = str(model_name_or_path)
        self.normalization = normalization
        self.generation = generation if generation is not None else GenerationSettings()
        self.action_separator = action_separator
        if score_batch_tokens < 1:
            raise ValueError(f"score_batch_tokens must be >= 1, got {score_batch_tokens}")
        self.score_batch_tokens = int(score_batch_tokens)
        #: A prefix forest row (several scoring trees packed as one trie, rl/prefix_forest.py)
        #: holds at most this many tokens unless one tree needs more; its attention covers the
        #: row, so a wider row shares more prefixes but attends over more slots.
        self.forest_row_tokens = 256
        self.lora = lora
        self.device = resolve_device(device)
        #: Run the decoder stack of the gradient passes compiled (``torch.compile``,
        #: :mod:`agentbench_poad.rl.compiled_layers`): equal to the eager pass to float rounding
        #: only. Checked here, before the model loads; compiled on first use.
        self.compile_layers = bool(compile_layers)
        if self.compile_layers:
            from agentbench_poad.rl.compiled_layers import check_compile_layers

            check_compile_layers(self.device)
        #: The compiled stack (:meth:`_gradient_stack`), None until the first gradient pass.
        self._compiled_stack: Any = None
        base, tokenizer = load_causal_lm(model_name_or_path, dtype=dtype, device=self.device)
        self.tokenizer = tokenizer
        self.chat_template = bool(chat_template)
        if self.chat_template and not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"chat_template=True, but the tokenizer of {model_name_or_path} has no chat "
                "template; use an instruct model (e.g. smollm2-135m) or chat_template=False"
            )
        self._frozen_model: torch.nn.Module | None = None
        num_layers = int(_text_config(base).num_hidden_layers)
        if lora_layers is not None:
            if lora is None:
                raise ValueError(
                    "lora_layers needs LoRA adapters; pass lora=LoraSettings(...) or "
                    "lora_layers=None for full fine-tuning"
                )
            if not isinstance(lora_layers, int) or not 1 <= lora_layers <= num_layers:
                raise ValueError(
                    f"lora_layers must be an int in [1, {num_layers}] (the model's "
                    f"decoder layers), got {lora_layers!r}"
                )
        if frozen_cache_tokens < 0:
            raise ValueError(f"frozen_cache_tokens must be >= 0, got {frozen_cache_tokens}")
        self.lora_layers = lora_layers
        #: Index of the lowest adapted decoder layer (0: every layer is adapted or trained).
        self.first_adapted_layer: int = 0 if lora_layers is None else num_layers - lora_layers
        self.frozen_cache_tokens = int(frozen_cache_tokens)
        #: Start from the cached frozen lower-layer states when ``lora_layers`` allows it; False
        #: runs the whole model every time (same results; for checks and benchmarks).
        self.reuse_lower_layers = True
        #: Lower-layer states of token sequences (prompt + chosen action), for the PPO update
        #: and the critic, and of whole scoring trees (prompt + offered actions), for act().
        self._frozen_cache = _StateCache(self.frozen_cache_tokens)
        self._tree_cache = _StateCache(self.frozen_cache_tokens)
        #: The critic's frozen features of (prompt, action tokens) pairs (critic_features).
        self._feature_cache = _StateCache(self.frozen_cache_tokens)
        #: Memoise restricted-action scores under fixed weights (rollouts, evaluation; see
        #: ActionScoring._score_memo) and the critic's frozen features (critic_features), both
        #: exact; False computes every call afresh (checks, benchmarks).
        self.memoize = True
        #: How many (prompt, offered actions) pairs the score memo keeps (least recently used
        #: dropped first).
        self.score_memo_entries = 512
        self._score_memos: OrderedDict[Any, Any] = OrderedDict()
        #: (prompt, offered actions) -> their token ids (ActionScoring._encoded)
        self._encodings: OrderedDict[Any, Any] = OrderedDict()
        self._score_memo_state: Any = None
        #: (scoring state, {(prompt, actions): scores}) of the update's scoring passes, read by
        #: the shared KL guard (ActionScoring.guard_candidate_log_probs)
        self._guard_record: tuple[Any, dict[Any, Any]] = (None, {})
        if lora is not None:
            import peft

            for param in base.parameters():
                param.requires_grad_(False)
            # peft draws the adapters' A matrices from the global RNG: fork it so that building
            # a policy leaves the caller's random stream as it was. (B starts at zero, so the
            # adapted model equals the base; redraw A from a generator for seeded runs.)
            rng_devices = [self.device.index or 0] if self.device.type == "cuda" else []
            with warnings.catch_warnings(), torch.random.fork_rng(devices=rng_devices):
                # peft calls a transformers API deprecated in 5.x; nothing for users to act on.
                warnings.filterwarnings(
                    "ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning
                )
                peft_config = lora.to_peft_config()
                if lora_layers is not None:
                    peft_config.layers_to_transform = list(
                        range(self.first_adapted_layer, num_layers)
                    )
                self.model = peft.get_peft_model(base, peft_config)
            # peft already up-casts adapters of half-precision bases; make it a guarantee.
            for param in self.model.parameters():
                if param.requires_grad and param.dtype != torch.float32:
                    param.data = param.data.float()
        else:
            import copy

            self.model = base
            for param in self.model.parameters():
                param.requires_grad_(True)
            frozen = copy.deepcopy(base)
            for param in frozen.parameters():
                param.requires_grad_(False)
            # Kept out of the module tree: not in state_dict(), parameters() or .to() moves.
            object.__setattr__(self, "_frozen_model", frozen.eval())
        self.model.eval()
        self.hidden_size: int = int(_text_config(self._hf_model()).hidden_size)
        if lora_layers is not None:
            decoder = _decoder_of(self._hf_model())
            if not isinstance(getattr(decoder, "layers", None), torch.nn.ModuleList) or not hasattr(
                decoder, "norm"
            ):
                raise ValueError(
                    f"lora_layers needs a Llama-style decoder (.layers and .norm, as Llama, "
                    f"Mistral, Qwen2 have); {type(decoder).__name__} has not: use lora_layers=None"
                )
        self._keep_logits = _forward_accepts(self._hf_model(), "logits_to_keep")
        #: Logits are the LM head of the last hidden state, nothing more (Llama, Mistral, Qwen2,
        #: SmolLM); models that scale or soft-cap them are always run through their own forward.
        text_config = _text_config(self._hf_model())
        self._plain_lm_head = all(
            getattr(text_config, name, None) in (None, 1, 1.0)
            for name in ("final_logit_softcapping", "logit_scale", "logits_scaling")
        ) and callable(getattr(self._hf_model(), "get_output_embeddings", None))
        eos = self.tokenizer.eos_token_id
        eos_ids = {eos} if eos is not None else set()
        gen_eos = getattr(
            getattr(self._hf_model(), "generation_config", None), "eos_token_id", None
        )
        if gen_eos is not None:
            eos_ids.update([gen_eos] if isinstance(gen_eos, int) else gen_eos)
        self.eos_token_ids: frozenset[int] = frozenset(int(i) for i in eos_ids)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id: int = int(pad if pad is not None else 0)

    # ------------------------------------------------------------------ helpers

    def _hf_model(self) -> torch.nn.Module:
        """The transformers model under the (optional) peft wrapper."""
        get_base = getattr(self.model, "get_base_model", None)
        return get_base() if callable(get_base) and self.lora is not None else self.model

    @contextlib.contextmanager
    def _frozen_backbone(self) -> Iterator[torch.nn.Module]:
        """The pre-trained decoder stack (no LM head) with the adapter disabled."""
        if self.lora is not None:
            with self.model.disable_adapter():
                yield _decoder_of(self._hf_model())
        else:
            assert self._frozen_model is not None
            if next(self._frozen_model.parameters()).device != self.device:
                self._frozen_model.to(self.device)
            yield _decoder_of(self._frozen_model)

    def _lm(self, keep: int = 0, **inputs: Any) -> Any:
        """Forward of the (adapted) LM, computing logits only for the last ``keep`` positions."""
        if keep and self._keep_logits:
            inputs["logits_to_keep"] = keep
        return self.model(**inputs)

    # ------------------------------------------- frozen lower layers (lora_layers)

    @contextlib.contextmanager
    def _only_layers(
        self, start: int, stop: int | None = None, *, final_norm: bool = True
    ) -> Iterator[torch.nn.Module]:
        """The decoder stack running only its layers ``[start:stop]`` (restored on exit).

        With ``start > 0`` the stack is fed the hidden states entering layer ``start`` as
        ``inputs_embeds`` (a Llama-style stack adds nothing to ``inputs_embeds`` before its
        layers; rotary positions and the mask come from ``position_ids``/``attention_mask``).
        ``final_norm=False`` skips the final norm, so the output is the last run layer's.
        """
        decoder = _decoder_of(self._hf_model())
        layers, norm = decoder.layers, decoder.norm
        # Stacks with per-layer attention kinds (Gemma 2/3, Qwen2/3: sliding-window or full)
        # look layer i's kind up as config.layer_types[i]: slice it with the layers, or the
        # run layers get the mask and rotary base of the bottom ones.
        config = getattr(decoder, "config", None)
        kinds = getattr(config, "layer_types", None)
        sliced_kinds = isinstance(kinds, (list, tuple)) and len(kinds) == len(layers)
        decoder.layers = layers[start:stop]
        if sliced_kinds:
            config.layer_types = list(kinds)[start:stop]
        if not final_norm:
            decoder.norm = torch.nn.Identity()
        try:
            yield decoder
        finally:
            decoder.layers = layers
            decoder.norm = norm
            if sliced_kinds:
                config.layer_types = kinds

    def _gradient_stack(self, decoder: torch.nn.Module) -> Any:
        """What a scoring pass calls to run ``decoder`` (as :meth:`_only_layers` holds it):
        ``decoder`` itself, or with ``compile_layers`` and gradients on, its compiled stack
        (made once, on the first such pass). Passes without gradients stay eager."""
        if not self.compile_layers or not torch.is_grad_enabled():
            return decoder
        if self._compiled_stack is None:
            from agentbench_poad.rl.compiled_layers import compiled_stack

            self._compiled_stack = compiled_stack(_decoder_of(self._hf_model()))
        return self._compiled_stack

    @contextlib.contextmanager
    def _top_layer_at(self, rows: torch.Tensor) -> Iterator[None]:
        """The top decoder layer runs its query projection, its attention's output projection
        and its MLP at the flat positions ``rows`` only (its keys and values everywhere, as its
        attention reads them); its output elsewhere is zeros and must not be read. Exact at
        ``rows``: those parts act position by position. A stack whose top layer lacks them
        runs unchanged."""
        layer = _decoder_of(self._hf_model()).layers[-1]
        attention = getattr(layer, "self_attn", None)
        parts = [(layer, "mlp"), (attention, "q_proj"), (attention, "o_proj")]
        parts = [(owner, name) for owner, name in parts if owner is not None]
        if not all(isinstance(getattr(o, n, None), torch.nn.Module) for o, n in parts):
            yield
            return
        originals = [getattr(o, n) for o, n in parts]
        try:
            for (owner, name), inner in zip(parts, originals):
                setattr(owner, name, _AtRows(inner, rows))
            yield
        finally:
            for (owner, name), inner in zip(parts, originals):
                setattr(owner, name, inner)

    def _layer_masks(
        self, mask: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor | dict[str, torch.Tensor]:
        """A ready additive mask ``(B, 1, W, W)`` (the scoring tree's) as the decoder reads it.

        Every layer uses a ready 4-D mask as it is, so a stack with sliding-window layers (Gemma
        2/3, whose config names each layer's kind in ``layer_types``) gets one mask per kind:
        its sliding layers also hide keys ``sliding_window`` or more positions back, as they do
        in running text. Other stacks get ``mask`` unchanged.
        """
        config = _text_config(self._hf_model())
        window = getattr(config, "sliding_window", None)
        if not window or "sliding_attention" not in (getattr(config, "layer_types", None) or ()):
            return mask
        far = positions[:, None, :, None] - positions[:, None, None, :] >= window
        sliding = mask.masked_fill(far, torch.finfo(mask.dtype).min)
        return {"full_attention": mask, "sliding_attention": sliding}

    def _reuse_from(self) -> int:
        """The layer the cached-state paths start from (0: run the whole model)."""
        return self.first_adapted_layer if self.reuse_lower_layers else 0

    def _remember_lower(self, sequence: Sequence[int], hidden: torch.Tensor) -> None:
        """Cache ``hidden`` ``(T, H)``: the states entering the lowest adapted layer."""
        self._frozen_cache.put(tuple(int(t) for t in sequence), hidden)

    @property
    def _frozen_cache_size(self) -> int:
        return self._frozen_cache.size

    def clear_frozen_cache(self) -> None:
        """Forget the cached lower-layer hidden states, critic features and memoised scores
        (they are recomputed when needed)."""
        self._frozen_cache.clear()
        self._tree_cache.clear()
        self._feature_cache.clear()
        self._score_memos.clear()

    def _lower_hidden(self, sequences: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Per sequence, the ``(T_i, H)`` hidden states entering the lowest adapted layer.

        Taken from the cache where present; the others run through the frozen lower layers once
        (no grad) and are cached. They depend on nothing that trains (the layers below the
        adapters are frozen), so they are exactly what a full forward computes.
        """
        keys = [tuple(int(t) for t in s) for s in sequences]
        cached = {k: v for k in dict.fromkeys(keys) if (v := self._frozen_cache.get(k)) is not None}
        missing = [k for k in dict.fromkeys(keys) if k not in cached]
        fresh: dict[tuple[int, ...], torch.Tensor] = {}
        for key in missing:  # alone: a cached entry does not depend on its batch
            ids, attention = self._right_padded([key])
            with (
                torch.no_grad(),
                self._only_layers(0, self.first_adapted_layer, final_norm=False) as lower,
            ):
                out = lower(input_ids=ids, attention_mask=attention, use_cache=False)
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            fresh[key] = hidden[0, : len(key)]
            self._remember_lower(key, fresh[key])
        return [cached[k].to(self.device) if k in cached else fresh[k] for k in keys]

    def _padded_lower(
        self, sequences: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded ``(B, T, H)`` lower hidden states (zeros at pads) and their mask."""
        rows = self._lower_hidden(sequences)
        width = max(len(s) for s in sequences)
        hidden = rows[0].new_zeros((len(rows), width, rows[0].shape[-1]))
        attention = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        for row, states in enumerate(rows):
            hidden[row, : states.shape[0]] = states
            attention[row, : states.shape[0]] = 1
        return hidden, attention

    def prompt_text(self, prompt: str) -> str:
        """The text the model reads for ``prompt``: the prompt itself, or with
        ``chat_template`` the prompt as a user turn followed by the assistant header."""
        return chat_prompt_text(self.tokenizer, prompt) if self.chat_template else prompt

    def encode_prompt(self, prompt: str) -> list[int]:
        """The prompt's token ids, with the tokenizer's special tokens (BOS; a chat template
        writes its own)."""
        ids = list(
            self.tokenizer(self.prompt_text(prompt), add_special_tokens=not self.chat_template)[
                "input_ids"
            ]
        )
        if not ids:
            raise ValueError(
                "the prompt encodes to no tokens (empty prompt and a tokenizer that adds no BOS); "
                "give the policy a non-empty prompt"
            )
        return ids

    def encode_action(self, prompt: str, action: str) -> list[int]:
        """Token ids of a restricted action, as appended after ``encode_prompt(prompt)``.

        The action is tokenized in context (``prompt + separator + action``), like the reference,
        so SentencePiece's leading-space pieces come out as they would in running text. When the
        tokenizer merges across the prompt's end (its prefix tokens change), the action's tokens
        are the last ``len(tokens(action))`` tokens of the joint encoding, the reference's rule.
        """
        return self._encode_action(prompt, self.encode_prompt(prompt), action)

    def _encode_action(self, prompt: str, prompt_ids: list[int], action: str) -> list[int]:
        """:meth:`encode_action` with the prompt's ids already known."""
        return self._encode_actions(prompt, prompt_ids, [action])[0]

    def _encode_actions(
        self, prompt: str, prompt_ids: list[int], actions: Sequence[str]
    ) -> list[list[int]]:
        """:meth:`encode_action` of several actions after one prompt (one tokenizer call)."""
        text = self.prompt_text(prompt)
        joint = self.tokenizer(
            [text + self.action_separator + a for a in actions],
            add_special_tokens=not self.chat_template,
        )["input_ids"]
        encoded = []
        for action, full in zip(actions, joint):
            full = list(full)
            if full[: len(prompt_ids)] == prompt_ids:
                encoded.append(full[len(prompt_ids) :])
                continue
            alone = list(self.tokenizer(action, add_special_tokens=False)["input_ids"])
            encoded.append(full[-len(alone) :] if alone else [])
        return encoded

    def _right_padded(
        self, sequences: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) ids right-padded with the pad id, and the (B, T) attention mask."""
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, : len(seq)] = 1
        return ids.to(self.device), mask.to(self.device)

    # ---------------------------------------------------------------- weights

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the actor optimiser updates (the LoRA weights by default)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def save_adapter(self, directory: str | Path) -> Path:
        """Save the trainable weights: the LoRA adapter (peft format), or the full model."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory)
        if self.lora is None:
            self.tokenizer.save_pretrained(directory)
        return directory

    def load_adapter(self, directory: str | Path) -> None:
        """Load weights written by :meth:`save_adapter` into this policy (in place)."""
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(
                f"no adapter directory at {directory}; see LMPolicy.save_adapter"
            )
        if self.lora is not None:
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            weights = load_peft_weights(str(directory), device=str(self.device))
            result = set_peft_model_state_dict(self.model, weights)
            unexpected = getattr(result, "unexpected_keys", [])
            if unexpected:
                raise ValueError(
                    f"adapter in {directory} does not match this policy's LoRA settings "
                    f"(unexpected keys such as {unexpected[0]!r})"
                )
        else:
            loaded, _ = load_causal_lm(
                directory, dtype=next(self.model.parameters()).dtype, device=self.device
            )
            self.model.load_state_dict(loaded.state_dict())


def _text_config(model: torch.nn.Module) -> Any:
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _decoder_of(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack (embeddings + layers + final norm, no LM head) of a causal LM."""
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        decoder = get_decoder()
        if decoder is not None and decoder is not model:
            return decoder
    base = getattr(model, "base_model", None)
    if base is not None and base is not model:
        return base
    raise TypeError(
        f"cannot find the decoder stack of {type(model).__name__}; critic features need a model "
        "with get_decoder() or base_model (any transformers *ForCausalLM has one)"
    )


def _multinomial(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One sample per row of ``probs`` (1-D: one sample), drawn on the generator's device."""
    device = generator.device if generator is not None else probs.device
    flat = probs.reshape(-1, probs.shape[-1]).to(device)
    drawn = torch.multinomial(flat, 1, generator=generator).squeeze(-1).to(probs.device)
    return drawn if probs.ndim > 1 else drawn[0]


def _check_batch(prompts: Sequence[str], available_actions: Sequence[Any]) -> None:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string; wrap it: [prompt]")
    if len(prompts) != len(available_actions):
        raise ValueError(
            f"got {len(prompts)} prompts but {len(available_actions)} available_actions entries"
        )


__all__ = ["PolicyModel"]
