"""Scoring restricted actions: every offered action's log-likelihood after the prompt.

In restricted-action environments (Overcooked, VirtualHome) the policy is a categorical over the
offered actions: each action is scored by its token log-likelihood after the prompt, normalised
(:data:`~agentbench_poad.rl.policy_types.NORMALIZATIONS`, by words in the paper), and the
log-softmax of the scores is the policy (:meth:`ActionScoring.candidate_log_probs`, with
gradients, for TWOSOME; :meth:`~agentbench_poad.rl.policy.LMPolicy.act` samples from it).

Read top to bottom:

* :meth:`ActionScoring._candidate_tries` -- a prompt's candidates as a trie (a shared prefix such
  as " pick up the" runs once);
* :meth:`ActionScoring._candidate_log_probs` -- per-token log-probs read from a table of logits;
* :meth:`ActionScoring._score_group` -- one forward over the *prefix forest* of a group of prompts
  (:mod:`agentbench_poad.rl.prefix_forest`: each prompt, then its candidates' trie, all of them
  one trie over token prefixes, with a mask that lets a node see its ancestors only), exact
  against one forward per candidate;
* :meth:`ActionScoring._tree_lower_states` -- with ``lora_layers``, each tree's frozen
  lower-layer states from a cache, so only the adapted top layers run;
  :meth:`ActionScoring._slot_reader` runs them and the LM head at the read slots
  (:mod:`agentbench_poad.rl.slot_head`);
* :meth:`ActionScoring._score_restricted` -- batching: repeated (prompt, actions) pairs scored
  once (across calls too, under fixed weights: :meth:`ActionScoring._score_memo`), prompts
  grouped under ``score_batch_tokens`` (:meth:`ActionScoring._score_unique`), scores normalised.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch

from agentbench_poad.rl.policy_model import PolicyModel, _check_batch
from agentbench_poad.rl.policy_types import NORMALIZATIONS
from agentbench_poad.rl.prefix_forest import Forest, build_forest
from agentbench_poad.rl.slot_head import slot_log_probs

#: ``read(rows, targets, with_entropy) -> (log-probs (N,), slot entropies (S,))``.
SlotReader = Callable[[Sequence[int], Sequence[int], bool], "tuple[torch.Tensor, torch.Tensor]"]


class ActionScoring(PolicyModel):
    """The restricted-action scoring of :class:`~agentbench_poad.rl.policy.LMPolicy`."""

    @staticmethod
    def _candidate_tries(
        candidates: list[list[list[int]]], keep_last: bool
    ) -> tuple[list[tuple[list[int], list[int], list[int]]], list[list[list[int]]]]:
        """Per prompt, its candidates' tokens as a trie, and each candidate's path through it.

        A prefix shared by several candidates (such as " pick up the") is one run of nodes: in a
        causal model a token's states depend on its prefix only. A candidate's last token
        predicts nothing that is scored, so it is left out unless ``keep_last``.

        Returns:
            ``(tries, paths)``: ``tries[i] = (tokens, parents, depths)`` of prompt ``i``'s nodes
            (parent -1: the node follows the prompt directly) and ``paths[i][k][j]`` the node of
            token ``j`` of candidate ``k``.
        """
        tries: list[tuple[list[int], list[int], list[int]]] = []
        paths: list[list[list[int]]] = []
        for group in candidates:
            tokens_of: list[int] = []
            parents: list[int] = []
            depths: list[int] = []
            children: dict[tuple[int, int], int] = {}
            group_paths = []
            for tokens in group:
                path, parent = [], -1
                for token in tokens if keep_last else tokens[:-1]:
                    node = children.get((parent, token))
                    if node is None:
                        node = children[(parent, token)] = len(tokens_of)
                        tokens_of.append(token)
                        parents.append(parent)
                        depths.append(0 if parent < 0 else depths[parent] + 1)
                    path.append(node)
                    parent = node
                group_paths.append(path)
            tries.append((tokens_of, parents, depths))
            paths.append(group_paths)
        return tries, paths

    def _candidate_log_probs(
        self,
        read: SlotReader,
        candidates: list[list[list[int]]],
        row_of: Callable[[int, int, int], int],
        entropy: list[torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        """Per prompt, ``(K_i, L)`` log p(token j of candidate k | prompt, earlier tokens).

        ``read(rows, targets, with_entropy)`` gives the log-probability of each target token at
        its slot and every slot's entropy (:meth:`_slot_reader`); ``row_of(i, k, j)`` is the slot
        that predicts token ``j`` of candidate ``k`` of prompt ``i``. Pads are 0. With
        ``entropy`` (a list), per prompt the ``(K_i, L)`` full-vocabulary entropies of the same
        positions are appended to it (what token-level PPO's entropy bonus reads).
        """
        counts = [len(c) for c in candidates]
        width = max(len(c) for group in candidates for c in group)
        source, out_row, out_col, targets = [], [], [], []
        row = 0
        for i, group in enumerate(candidates):
            for k, tokens in enumerate(group):
                for j, token in enumerate(tokens):
                    source.append(row_of(i, k, j))
                    out_row.append(row)
                    out_col.append(j)
                    targets.append(token)
                row += 1
        scored, slot_entropy = read(source, targets, entropy is not None)
        at = (
            torch.tensor(out_row, device=scored.device),
            torch.tensor(out_col, device=scored.device),
        )
        log_probs = torch.zeros((row, width), device=scored.device, dtype=scored.dtype)
        log_probs = log_probs.index_put(at, scored)
        if entropy is not None:
            per_position = slot_entropy[torch.tensor(source, device=scored.device)]
            entropies = torch.zeros_like(log_probs).index_put(at, per_position)
            entropy.extend(torch.split(entropies, counts, dim=0))
        return list(torch.split(log_probs, counts, dim=0))

    def _score_group(
        self,
        prompt_ids: list[list[int]],
        candidates: list[list[list[int]]],
        entropy: list[torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        """Token log-probs of every candidate after its prompt, each shared prefix run once.

        One forward over the prefix forest of the group (:func:`build_forest`: the prompts and
        their candidates' tries as one trie over token prefixes, so a prompt prefix that several
        prompts share runs once too), with the LM head only where a logit is read. With
        ``lora_layers`` the frozen lower layers' states of each (prompt, candidates) tree come
        from a cache (:meth:`_tree_lower_states`) and only the adapted top layers run; otherwise
        the whole model runs. Exact: equal to one plain forward per prompt + candidate.

        With ``entropy`` (a list), per prompt the ``(K_i, L)`` entropies of
        :meth:`_candidate_log_probs` are appended.

        Returns:
            Per prompt, a ``(K_i, L)`` float32 tensor of log p(token j | prompt, tokens < j), 0 at
            pads (``L`` = the longest candidate of the group). Differentiable when grad is on.
        """
        if max(len(c) for group in candidates for c in group) == 0:
            empty = [torch.zeros((len(c), 0), device=self.device) for c in candidates]
            if entropy is not None:
                entropy.extend(e.clone() for e in empty)
            return empty
        # A candidate's last token predicts nothing scored: it is not in the trie.
        tries, paths = self._candidate_tries(candidates, keep_last=False)
        forest = self._forest(prompt_ids, tries)
        inputs = (
            forest.gather(self._scoring_lower_states(prompt_ids, candidates, paths))
            if self._reuse_from() > 0
            else forest.ids.to(self.device)
        )
        # The slots whose logits are read: each prompt's last token and the trie nodes of every
        # candidate's tokens but its last (tree i's elements: its prompt's tokens, then its
        # trie's nodes).
        slots: dict[tuple[int, int], int] = {}
        for i, (p, group, group_paths) in enumerate(zip(prompt_ids, candidates, paths)):
            slots.setdefault(forest.where[i][len(p) - 1], len(slots))
            for tokens, path in zip(group, group_paths):
                for node in path[: len(tokens) - 1]:
                    slots.setdefault(forest.where[i][len(p) + node], len(slots))
        read = self._slot_reader(inputs, forest, list(slots))

        def row_of(i: int, k: int, j: int) -> int:
            n_p = len(prompt_ids[i])
            return slots[forest.where[i][n_p - 1 if j == 0 else n_p + paths[i][k][j - 1]]]

        return self._candidate_log_probs(read, candidates, row_of, entropy)

    def _forest(
        self, prompt_ids: list[list[int]], tries: list[tuple[list[int], list[int], list[int]]]
    ) -> Forest:
        """The prefix forest of scoring trees (one tree alone: its prompt, then its trie)."""
        return build_forest(
            prompt_ids, tries, row_tokens=self.forest_row_tokens, pad_id=self.pad_token_id
        )

    def _mask_dtype(self) -> torch.dtype:
        dtype = self._hf_model().dtype
        return dtype if dtype.is_floating_point else torch.float32

    def _scoring_lower_states(
        self,
        prompt_ids: list[list[int]],
        candidates: list[list[list[int]]],
        paths: list[list[list[int]]],
    ) -> list[torch.Tensor]:
        """Per prompt, the lower states of its scoring tree's elements (prompt tokens, then the
        nodes of ``paths``: every candidate token but its last), read from its full tree
        (:meth:`_tree_lower_states`)."""
        full_tries, full_paths = self._candidate_tries(candidates, keep_last=True)
        states = self._tree_lower_states(prompt_ids, candidates, full_tries)
        out = []
        for p, tree_paths, tree_full_paths, rows in zip(prompt_ids, paths, full_paths, states):
            node_of: dict[int, int] = {}
            for path, full_path in zip(tree_paths, tree_full_paths):
                node_of.update(zip(path, full_path))
            index = list(range(len(p))) + [len(p) + node_of[n] for n in range(len(node_of))]
            out.append(rows[torch.tensor(index, dtype=torch.long, device=rows.device)])
        return out

    def _tree_lower_states(
        self,
        prompt_ids: list[list[int]],
        candidates: list[list[list[int]]],
        tries: list[tuple[list[int], list[int], list[int]]],
    ) -> list[torch.Tensor]:
        """Per prompt, the ``(P_i + N_i, H)`` states entering the lowest adapted layer at its
        prompt tokens and then at the nodes of its *full* trie ``tries[i]`` (every token of every
        candidate, ``_candidate_tries(..., keep_last=True)``): the scoring pass reads the nodes
        that predict a token (:meth:`_scoring_lower_states`), the critic's features and a chosen
        action's states read the rest (:meth:`critic_features`).

        Taken from the tree cache where present (keyed by the prompt and its candidates); the
        others run once through the frozen lower layers, in the tree layout, each alone (its
        states then do not depend on its batch), and are cached.
        Exact: nothing below the adapters ever changes, and a rollout meets the same
        (observation, offered actions) pairs again and again.
        """
        keys = [
            (tuple(p), tuple(tuple(c) for c in group)) for p, group in zip(prompt_ids, candidates)
        ]
        states: list[torch.Tensor | None] = [self._tree_cache.get(key) for key in keys]
        missing = list(dict.fromkeys(k for k, s in zip(keys, states) if s is None))
        fresh = {}
        for key in missing:
            # Each tree alone: a cached entry does not depend on what it was computed with, so
            # a resumed run (empty caches) computes bit for bit what the uninterrupted one kept.
            r = keys.index(key)
            # One tree alone: its prompt's tokens, then its trie's nodes, in element order.
            tree = self._forest([prompt_ids[r]], [tries[r]])
            positions = tree.positions.to(self.device)
            mask = tree.additive_mask(self._mask_dtype(), self.device)
            with (
                torch.no_grad(),
                self._only_layers(0, self.first_adapted_layer, final_norm=False) as lower,
            ):
                out = lower(
                    input_ids=tree.ids.to(self.device),
                    attention_mask=self._layer_masks(mask, positions),
                    position_ids=positions,
                    use_cache=False,
                )
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            fresh[key] = hidden[0, : len(prompt_ids[r]) + len(tries[r][0])].detach()
            self._tree_cache.put(key, fresh[key])
        if fresh:
            states = [s if s is not None else fresh[k] for k, s in zip(keys, states)]
        return [s.to(self.device) for s in states if s is not None]

    def _slot_reader(
        self, inputs: torch.Tensor, forest: Forest, slots: list[tuple[int, int]]
    ) -> SlotReader:
        """Run the forest once; return ``read(rows, targets, with_entropy)`` of its slots.

        ``inputs`` are token ids ``(R, W)`` (the whole model runs) or, with ``lora_layers``, the
        states ``(R, W, H)`` entering the lowest adapted layer (only the adapted top layers run).
        ``slots`` are the ``(row, column)`` positions whose next token is read. ``read`` gives
        ``(log p(targets[n] | slot rows[n]) (N,), entropy of each slot (S,))`` in float32: with
        a plain LM head (logits are the head's product, nothing more) through
        :func:`slot_log_probs`, which runs the head at the slots only and skips idle rows in the
        backward, and the top layer's per-position parts run at the slots only
        (:meth:`_top_layer_at`); a model that post-processes its logits (scaling, soft-capping) runs its own
        forward and the log-softmax through autograd. With ``compile_layers`` a pass with
        gradients runs the decoder stack compiled (:meth:`_gradient_stack`).
        """
        at = torch.tensor(slots, dtype=torch.long, device=self.device)
        positions = forest.positions.to(self.device)
        mask = forest.additive_mask(self._mask_dtype(), self.device)
        start = 0 if inputs.dtype == torch.long else self.first_adapted_layer
        feed = {"input_ids" if start == 0 else "inputs_embeds": inputs}
        feed.update(
            attention_mask=self._layer_masks(mask, positions),
            position_ids=positions,
            use_cache=False,
        )
        head = self._hf_model().get_output_embeddings() if self._plain_lm_head else None
        if head is not None and getattr(head, "bias", None) is None:
            # Only the slots are read: the top layer's position-wise parts run there only.
            flat = at[:, 0] * forest.ids.shape[1] + at[:, 1]
            with self._only_layers(start) as decoder, self._top_layer_at(flat):
                out = self._gradient_stack(decoder)(**feed)
            states = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            states = states[at[:, 0], at[:, 1]]

            def read_head(
                rows: Sequence[int], targets: Sequence[int], with_entropy: bool
            ) -> tuple[torch.Tensor, torch.Tensor]:
                return slot_log_probs(
                    states,
                    head.weight,
                    torch.tensor(rows, dtype=torch.long, device=self.device),
                    torch.tensor(targets, dtype=torch.long, device=self.device),
                    with_entropy=with_entropy,
                )

            return read_head
        if head is not None:
            with self._only_layers(start) as decoder:
                out = self._gradient_stack(decoder)(**feed)
            states = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            logits = head(states[at[:, 0], at[:, 1]])
        else:
            with self._only_layers(start):
                logits = self.model(**feed).logits[at[:, 0], at[:, 1]]
        log_p = torch.log_softmax(logits.float(), dim=-1)

        def read_logits(
            rows: Sequence[int], targets: Sequence[int], with_entropy: bool
        ) -> tuple[torch.Tensor, torch.Tensor]:
            picked = log_p[
                torch.tensor(rows, dtype=torch.long, device=self.device),
                torch.tensor(targets, dtype=torch.long, device=self.device),
            ]
            if not with_entropy:
                return picked, log_p.new_zeros(log_p.shape[0])
            return picked, -(log_p.exp() * log_p).sum(dim=-1)

        return read_logits

    def _score_restricted(
        self,
        prompts: Sequence[str],
        available_actions: Sequence[Sequence[str]],
        entropy: list[torch.Tensor] | None = None,
    ) -> list[tuple[list[list[int]], torch.Tensor, torch.Tensor]]:
        """Per prompt: (candidate token ids, token log-probs (K, L), normalised scores (K,)).

        A (prompt, offered actions) pair that repeats in the batch (a PPO minibatch meets the
        same observation many times) is scored once and its result shared (exact; autograd sums
        the gradients). Without gradients and in eval mode (rollouts, evaluation) a pair already
        scored under the same weights comes from the score memo (:meth:`_score_memo`).
        ``entropy``: see :meth:`_candidate_log_probs` (filled in prompt order, one entry per
        prompt).
        """
        for actions in available_actions:
            if not actions:
                raise ValueError(
                    "available_actions is an empty list; pass None for open-action environments"
                )
        memo = self._score_memo() if entropy is None else None
        keys = [(p, tuple(a)) for p, a in zip(prompts, available_actions)]
        if memo is not None:
            for key in dict.fromkeys(keys):
                if key not in memo:
                    # Alone, so an entry never depends on what it was scored with (a run
                    # resumed with an empty memo scores bit for bit what the uninterrupted run
                    # reused).
                    (memo[key],) = self._score_unique([key[0]], [list(key[1])])
                memo.move_to_end(key)
            while len(memo) > self.score_memo_entries:
                memo.popitem(last=False)
            return [memo[key] for key in keys]
        first = {key: n for n, key in enumerate(dict.fromkeys(keys))}
        if len(first) == len(keys):
            return self._score_unique(prompts, available_actions, entropy)
        unique = list(first)
        unique_entropy: list[torch.Tensor] | None = None if entropy is None else []
        scored = self._score_unique(
            [p for p, _ in unique], [list(a) for _, a in unique], unique_entropy
        )
        if entropy is not None and unique_entropy is not None:
            entropy.extend(unique_entropy[first[key]] for key in keys)
        return [scored[first[key]] for key in keys]

    def _score_unique(
        self,
        prompts: Sequence[str],
        available_actions: Sequence[Sequence[str]],
        entropy: list[torch.Tensor] | None = None,
    ) -> list[tuple[list[list[int]], torch.Tensor, torch.Tensor]]:
        """:meth:`_score_restricted` of distinct (prompt, actions) pairs: prompts are scored in
        groups whose cache (sum over candidates of prompt + candidate tokens) stays within
        ``score_batch_tokens``; a prompt is never split."""
        encoded = [
            self._encoded(prompt, actions) for prompt, actions in zip(prompts, available_actions)
        ]
        groups: list[list[int]] = []
        used = 0
        for i, (p, cands) in enumerate(encoded):
            cost = sum(len(p) + len(c) for c in cands)
            if groups and used + cost <= self.score_batch_tokens:
                groups[-1].append(i)
                used += cost
            else:
                groups.append([i])
                used = cost
        token_log_probs: list[torch.Tensor | None] = [None] * len(encoded)
        for group in groups:
            scored = self._score_group(
                [encoded[i][0] for i in group], [encoded[i][1] for i in group], entropy
            )
            for i, lp in zip(group, scored):
                token_log_probs[i] = lp
        normalise = NORMALIZATIONS[self.normalization]
        results = []
        for (_, cands), actions, lp in zip(encoded, available_actions, token_log_probs):
            assert lp is not None
            totals = lp.sum(dim=1)
            scores = torch.stack(
                [normalise(totals[k], len(cands[k]), actions[k]) for k in range(len(cands))]
            )
            results.append((cands, lp, scores))
        if self.model.training:  # an update's pass: what the shared KL guard reads
            self._record_for_guard(available_actions, prompts, results)
        return results

    def _encoded(self, prompt: str, actions: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """``(prompt ids, each offered action's ids)``, tokenized once per (prompt, actions)
        pair (least recently used dropped first): a PPO update meets each pair in every
        minibatch of every epoch, and the tokenizer is a pure function of its settings."""
        key = (prompt, tuple(actions), self.chat_template, self.action_separator)
        hit = self._encodings.get(key)
        if hit is None:
            prompt_ids = self.encode_prompt(prompt)
            hit = (prompt_ids, self._encode_actions(prompt, prompt_ids, list(actions)))
            self._encodings[key] = hit
            while len(self._encodings) > self.score_memo_entries:
                self._encodings.popitem(last=False)
        else:
            self._encodings.move_to_end(key)
        return list(hit[0]), [list(c) for c in hit[1]]

    def _score_memo(self) -> OrderedDict[Any, Any] | None:
        """The memo of restricted-action scores under the current weights, or None where scores
        must be computed afresh (gradients on, train mode, ``memoize`` off).

        A rollout or an evaluation meets the same (observation, offered actions) pairs again and
        again under fixed weights (an Overcooked task has a few dozen observations), so each is
        scored once. The memo is emptied whenever anything that the scores depend on changes:
        a parameter (its identity or its in-place version, which an optimiser step or a loaded
        adapter bumps), the adapters' on/off state, or the scoring settings. Exact: a hit is the
        result the same computation gave.
        """
        if not self.memoize or torch.is_grad_enabled() or self.model.training:
            return None
        state = self._scoring_state()
        if state != self._score_memo_state:
            self._score_memos.clear()
            self._score_memo_state = state
        return self._score_memos

    def _scoring_state(self) -> tuple[Any, ...]:
        """Everything restricted-action scores depend on: the scoring settings, each parameter
        (its identity and in-place version, which an optimiser step or a loaded adapter bumps)
        and the adapters' on/off state."""
        return (
            self.normalization,
            self.action_separator,
            self.chat_template,
            self.reuse_lower_layers,
            tuple((id(p), p._version) for p in self.model.parameters()),
            tuple(  # the adapter layers' on/off switch and active adapter names (peft)
                (m.disable_adapters, tuple(m.active_adapters))
                for m in self.model.modules()
                if isinstance(getattr(m, "disable_adapters", None), bool)
            ),
        )

    def guard_candidate_log_probs(
        self, prompts: Sequence[str], available_actions: Sequence[Sequence[str]]
    ) -> list[torch.Tensor]:
        """The categoricals over the offered actions for the shared KL guard, without gradient.

        Read from the policy's own record of what its last scoring passes computed under the
        current weights (the update's evaluation scores every offered action anyway), so the
        guard costs no second forward and never depends on values an agent hands in; a pair not
        in the record is scored here.
        """
        state, record = self._guard_record
        keys = [(p, tuple(a)) for p, a in zip(prompts, available_actions)]
        if state != self._scoring_state() or any(k not in record for k in keys):
            with torch.no_grad():
                return [c.detach() for c in self.candidate_log_probs(prompts, available_actions)]
        return [torch.log_softmax(record[k], dim=0) for k in keys]

    def _record_for_guard(
        self,
        available_actions: Sequence[Sequence[str]],
        prompts: Sequence[str],
        results: Sequence[tuple[Any, Any, torch.Tensor]],
    ) -> None:
        """Keep the scores of this pass (detached) for :meth:`guard_candidate_log_probs`."""
        state = self._scoring_state()
        if self._guard_record[0] != state:
            self._guard_record = (state, {})
        record = self._guard_record[1]
        for prompt, actions, (_, _, scores) in zip(prompts, available_actions, results):
            record[(prompt, tuple(actions))] = scores.detach()

    def candidate_log_probs(
        self, prompts: Sequence[str], available_actions: Sequence[Sequence[str]]
    ) -> list[torch.Tensor]:
        """Action-level log-policy over the offered actions, with gradients (TWOSOME).

        Returns:
            Per prompt, a ``(K_i,)`` float32 tensor: the log-softmax over its candidates of the
            normalised action log-likelihoods. Its entropy is ``-(p * log p).sum()``.
        """
        _check_batch(prompts, available_actions)
        if any(a is None for a in available_actions):
            raise ValueError("candidate_log_probs is for restricted actions; got None")
        return [
            torch.log_softmax(scores, dim=0)
            for _, _, scores in self._score_restricted(prompts, available_actions)
        ]


__all__ = ["ActionScoring"]
