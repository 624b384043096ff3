"""What the PPO update reads from the policy: token log-probs and the critic's features.

* :meth:`UpdateFeatures.token_log_probs` (with gradients) re-scores chosen action tokens after
  their prompts for token-level PPO (POAD, NTPO): log-probs under the untempered LM and the
  full-vocabulary entropy at each action position. With ``lora_layers`` it runs only the adapted
  top layers from cached frozen lower states, each distinct prompt once with its actions as a
  trie (:meth:`UpdateFeatures._token_log_probs_top`, the tree layout of
  :mod:`agentbench_poad.rl.action_scoring`). Given the offered actions, it scores them all in the
  same pass and returns their categoricals too, for the shared KL guard
  (:meth:`UpdateFeatures._token_and_candidate_log_probs`).
* :meth:`UpdateFeatures.critic_features` reads the frozen pre-trained model (adapter disabled)
  for the critic heads in :mod:`agentbench_poad.rl.critic`, always at real tokens, never at a pad
  (deliberate fix of docs/reference.md#deviation-critic-position), each (prompt, action) pair
  computed once (the frozen weights never change).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentbench_poad.rl.action_scoring import ActionScoring
from agentbench_poad.rl.policy_types import TokenLogProbs


class UpdateFeatures(ActionScoring):
    """The update-time passes of :class:`~agentbench_poad.rl.policy.LMPolicy`."""

    def token_log_probs(
        self,
        prompts: Sequence[str],
        action_token_ids: Sequence[Sequence[int]],
        available_actions: Sequence[Sequence[str] | None] | None = None,
    ) -> TokenLogProbs:
        """Log-probs and entropies of given action tokens after their prompts, with gradients.

        The batch is right-padded inside; logits are computed only from the earliest action
        position on, and the log-softmax is taken in float32. With ``lora_layers`` only the
        adapted top layers run, from the cached (or once computed) frozen lower-layer states.

        With ``available_actions`` (restricted actions, each sample's action one of them) the
        pass runs every offered action's tokens after the prompt instead (the scoring tree of
        :meth:`act`) and reads the chosen one's; the result then also carries each sample's
        categorical over its offered actions (``candidate_log_probs``), which the shared KL guard
        reads instead of scoring the candidates again (:meth:`_token_and_candidate_log_probs`).
        """
        if len(prompts) != len(action_token_ids):
            raise ValueError(
                f"got {len(prompts)} prompts but {len(action_token_ids)} action token lists"
            )
        if available_actions is not None and all(a for a in available_actions):
            fused = self._token_and_candidate_log_probs(
                prompts,
                action_token_ids,
                available_actions,  # type: ignore[arg-type]
            )
            if fused is not None:
                return fused
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        actions = [list(a) for a in action_token_ids]
        batch = len(prompts)
        width = max((len(a) for a in actions), default=0)
        if batch == 0 or width == 0:
            empty = torch.zeros((batch, width), device=self.device)
            return TokenLogProbs(empty, empty.clone(), empty.bool())
        if self._reuse_from() > 0:
            return self._token_log_probs_top(prompt_ids, actions)
        sequences = [p + a for p, a in zip(prompt_ids, actions)]
        first = min(len(p) for p in prompt_ids) - 1  # earliest position that predicts an action
        ids, attention = self._right_padded(sequences)
        out = self._lm(
            keep=int(ids.shape[1] - first),
            input_ids=ids,
            attention_mask=attention,
            use_cache=False,
        )
        total = ids.shape[1]
        offset = total - out.logits.shape[1]
        index = torch.zeros((batch, width), dtype=torch.long)
        targets = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.bool)
        for row, (p, a) in enumerate(zip(prompt_ids, actions)):
            n = len(a)
            index[row, :n] = torch.arange(len(p) - 1, len(p) - 1 + n) - offset
            targets[row, :n] = torch.as_tensor(a, dtype=torch.long)
            mask[row, :n] = True
        index, targets, mask = index.to(self.device), targets.to(self.device), mask.to(self.device)
        logits = out.logits.gather(1, index.unsqueeze(-1).expand(-1, -1, out.logits.shape[-1]))
        log_softmax = torch.log_softmax(logits.float(), dim=-1)
        log_probs = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1)
        zero = torch.zeros((), device=self.device)
        return TokenLogProbs(
            log_probs=torch.where(mask, log_probs, zero),
            entropy=torch.where(mask, entropy, zero),
            mask=mask,
        )

    def _token_and_candidate_log_probs(
        self,
        prompts: Sequence[str],
        action_token_ids: Sequence[Sequence[int]],
        available_actions: Sequence[Sequence[str]],
    ) -> TokenLogProbs | None:
        """:meth:`token_log_probs` of restricted actions in one pass with their categoricals.

        Every offered action is scored after its prompt (:meth:`_score_restricted`, each
        distinct (prompt, actions) pair once, as a trie); a sample's token log-probs and
        full-vocabulary entropies are its action's row, and its categorical is the log-softmax of
        the normalised scores. Exact: the same quantities as :meth:`token_log_probs` without
        ``available_actions`` and :meth:`candidate_log_probs`, from one forward (and one
        backward) instead of two forwards. None when a sample's action tokens are not one of its
        offered actions' (the caller then takes the plain path).
        """
        if len(available_actions) != len(prompts):
            raise ValueError(
                f"got {len(prompts)} prompts but {len(available_actions)} action lists"
            )
        entropy: list[torch.Tensor] = []
        scored = self._score_restricted(prompts, available_actions, entropy=entropy)
        chosen = []
        for (candidates, _, _), tokens in zip(scored, action_token_ids):
            tokens = list(tokens)
            if tokens not in candidates:
                return None
            chosen.append(candidates.index(tokens))
        width = max(len(a) for a in action_token_ids)

        def row(table: torch.Tensor, k: int) -> torch.Tensor:
            line = table[k, :width]
            return torch.nn.functional.pad(line, (0, width - line.shape[0]))

        lengths = torch.tensor([len(a) for a in action_token_ids], device=self.device)
        mask = torch.arange(width, device=self.device)[None, :] < lengths[:, None]
        return TokenLogProbs(
            log_probs=torch.stack([row(lp, k) for (_, lp, _), k in zip(scored, chosen)]),
            entropy=torch.stack([row(e, k) for e, k in zip(entropy, chosen)]),
            mask=mask,
            candidate_log_probs=[torch.log_softmax(scores, dim=0) for _, _, scores in scored],
        )

    def _token_log_probs_top(
        self, prompt_ids: list[list[int]], actions: list[list[int]]
    ) -> TokenLogProbs:
        """:meth:`token_log_probs` with ``lora_layers``: only the adapted top layers run (and
        backpropagate), from the frozen lower states, and each distinct prompt runs once.

        A PPO minibatch holds many samples of the same observation (an Overcooked task has a few
        dozen). Samples are grouped by prompt; each group's distinct actions run as a trie after
        one copy of the prompt (the prefix forest of :meth:`_score_group`: prompts that share a prefix
        run it once), and a sample's log-probs
        and entropies are read at its prompt's last token and its trie nodes. Exact: a token's
        states depend on its prefix only, and autograd sums the gradient over the samples that
        share a computation.
        """
        batch = len(prompt_ids)
        width = max(len(a) for a in actions)
        lower = self._lower_hidden([p + a for p, a in zip(prompt_ids, actions)])
        group_of: dict[tuple[int, ...], int] = {}
        groups: list[tuple[list[int], list[list[int]], int]] = []  # (prompt, actions, a sample)
        action_of: list[dict[tuple[int, ...], int]] = []
        where: list[tuple[int, int]] = []  # per sample: (group, index of its action there)
        for row, (p, a) in enumerate(zip(prompt_ids, actions)):
            g = group_of.setdefault(tuple(p), len(groups))
            if g == len(groups):
                groups.append((p, [], row))
                action_of.append({})
            k = action_of[g].setdefault(tuple(a), len(groups[g][1]))
            if k == len(groups[g][1]):
                groups[g][1].append(a)
            where.append((g, k))
        tries, paths = self._candidate_tries([g[1] for g in groups], keep_last=False)
        group_prompts = [g[0] for g in groups]
        forest = self._forest(group_prompts, tries)
        # Each group's elements (its prompt's tokens, then its trie's nodes) take their lower
        # states from its samples: the prompt from any of them, a trie node from a sample whose
        # action passes through it (row P + depth of its sequence).
        elements = [
            lower[row].new_zeros((len(p) + len(trie[0]), lower[row].shape[-1]))
            for (p, _, row), trie in zip(groups, tries)
        ]
        for g, (p, _, row) in enumerate(groups):
            elements[g][: len(p)] = lower[row][: len(p)]
        for row, (g, k) in enumerate(where):
            path = paths[g][k]
            if path:
                n_p = len(group_prompts[g])
                nodes = torch.as_tensor(path, dtype=torch.long, device=elements[g].device)
                elements[g][n_p + nodes] = lower[row][n_p : n_p + len(path)]
        hidden = forest.gather(elements)
        slots: dict[tuple[int, int], int] = {}
        for g, p in enumerate(group_prompts):
            slots.setdefault(forest.where[g][len(p) - 1], len(slots))
            for path in paths[g]:
                for node in path:
                    slots.setdefault(forest.where[g][len(p) + node], len(slots))
        read = self._slot_reader(hidden, forest, list(slots))
        index = torch.zeros((batch, width), dtype=torch.long)
        mask_out = torch.zeros((batch, width), dtype=torch.bool)
        reads: list[int] = []
        targets: list[int] = []
        for row, ((g, k), a) in enumerate(zip(where, actions)):
            n_p = len(group_prompts[g])
            for j, token in enumerate(a):
                slot = forest.where[g][n_p - 1 if j == 0 else n_p + paths[g][k][j - 1]]
                index[row, j] = slots[slot]
                mask_out[row, j] = True
                reads.append(slots[slot])
                targets.append(token)
        read_log_probs, entropy_of_slot = read(reads, targets, True)
        index, mask_out = index.to(self.device), mask_out.to(self.device)
        log_probs = torch.zeros((batch, width), device=self.device, dtype=read_log_probs.dtype)
        log_probs = log_probs.masked_scatter(mask_out, read_log_probs)
        entropy = entropy_of_slot[index]
        zero = torch.zeros((), device=self.device)
        return TokenLogProbs(
            log_probs=torch.where(mask_out, log_probs, zero),
            entropy=torch.where(mask_out, entropy, zero),
            mask=mask_out,
        )

    @torch.no_grad()
    def critic_features(
        self,
        prompts: Sequence[str],
        action_token_ids: Sequence[Sequence[int]] | None = None,
        available_actions: Sequence[Sequence[str] | None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Frozen pre-trained features for the critic (adapter disabled), float32.

        The features of a (prompt, action tokens) pair never change (the pre-trained weights
        are frozen), so each pair is computed once, alone (its value does not depend on its
        batch), and kept (least recently used dropped first, within ``frozen_cache_tokens``
        rows); a rollout meets the same pairs again and again. ``memoize = False`` computes the
        batch afresh in one pass.

        With ``available_actions`` (the actions offered at each prompt, the action one of them)
        a prompt's features come from its scoring tree instead: the frozen model runs once over
        the prompt and every offered action (as a trie, from the tree's cached lower-layer
        states with ``lora_layers``), and that gives the features of every offered action, so
        a later step that chooses another action in the same state computes nothing
        (:meth:`_tree_critic_rows`). Exact: the same features to float rounding.

        Args:
            prompts: Observations.
            action_token_ids: Per prompt, action tokens after it, or None for prompts only.
            available_actions: Per prompt, the offered actions (None where open), or None.

        Returns:
            ``(features, mask)``: features ``(B, L + 1, H)`` from the last layer (after the final
            norm) and mask ``(B, L + 1)`` bool. Position 0 is the last *real* prompt token (never
            a pad; deviation docs/reference.md#deviations) and position ``j`` the position of action token ``j``, i.e.
            the state after it. With ``action_token_ids=None`` the shape is ``(B, 1, H)``.
        """
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        actions = (
            [[] for _ in prompt_ids]
            if action_token_ids is None
            else [list(a) for a in action_token_ids]
        )
        if len(actions) != len(prompt_ids):
            raise ValueError(f"got {len(prompt_ids)} prompts but {len(actions)} action token lists")
        batch = len(prompt_ids)
        width = max((len(a) for a in actions), default=0) + 1
        features = torch.zeros((batch, width, self.hidden_size), device=self.device)
        mask = torch.zeros((batch, width), dtype=torch.bool, device=self.device)
        from_trees = (
            self._tree_features(prompts, actions, available_actions)
            if available_actions is not None and self.memoize
            else [None] * batch
        )
        for row, rows in enumerate(from_trees):
            if rows is not None:
                features[row, : rows.shape[0]] = rows
                mask[row, : rows.shape[0]] = True
        keys = [(tuple(p), tuple(a)) for p, a in zip(prompt_ids, actions)]
        fresh: dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}
        missing = [
            key
            for key in dict.fromkeys(k for k, tree in zip(keys, from_trees) if tree is None)
            if not self.memoize or key not in self._feature_cache
        ]
        if missing and not self.memoize:
            computed = self._fresh_critic_features(
                [list(p) for p, _ in missing], [list(a) for _, a in missing]
            )
            fresh.update(zip(missing, computed))
        else:
            for key in missing:  # alone: a kept entry does not depend on its batch
                (rows,) = self._fresh_critic_features([list(key[0])], [list(key[1])])
                fresh[key] = rows
                self._feature_cache.put(key, rows)
        for row, key in enumerate(keys):
            if from_trees[row] is not None:
                continue
            rows = fresh.get(key)
            if rows is None:
                rows = self._feature_cache.get(key)
            assert rows is not None
            features[row, : rows.shape[0]] = rows
            mask[row, : rows.shape[0]] = True
        return features, mask

    def _tree_features(
        self,
        prompts: Sequence[str],
        actions: list[list[int]],
        available_actions: Sequence[Sequence[str] | None],
    ) -> list[torch.Tensor | None]:
        """Per prompt, its ``(len(action) + 1, H)`` critic features read from its scoring
        tree's rows (:meth:`_tree_critic_rows`), or None where it has no offered actions or its
        action is none of them (the caller computes those on their own)."""
        if len(available_actions) != len(prompts):
            raise ValueError(
                f"got {len(prompts)} prompts but {len(available_actions)} available_actions"
            )
        out: list[torch.Tensor | None] = [None] * len(prompts)
        rows_with = [i for i, a in enumerate(available_actions) if a]
        if not rows_with:
            return out
        encoded = [self._encoded(prompts[i], available_actions[i]) for i in rows_with]  # type: ignore[arg-type]
        full_tries, full_paths = self._candidate_tries([c for _, c in encoded], keep_last=True)
        tree_rows = self._tree_critic_rows(
            [p for p, _ in encoded], [c for _, c in encoded], full_tries
        )
        for i, (_, candidates), paths, rows in zip(rows_with, encoded, full_paths, tree_rows):
            if actions[i] and actions[i] not in candidates:
                continue
            path = paths[candidates.index(actions[i])] if actions[i] else []
            index = torch.tensor([0, *(1 + n for n in path)], dtype=torch.long)
            out[i] = rows[index.to(rows.device)]
        return out

    def _tree_critic_rows(
        self,
        prompt_ids: list[list[int]],
        candidates: list[list[list[int]]],
        full_tries: list[tuple[list[int], list[int], list[int]]],
    ) -> list[torch.Tensor]:
        """Per tree, ``(1 + N_i, H)`` float32 frozen last-layer features: at the prompt's last
        token, then at every node of its full trie (every token of every offered action).

        Computed once per (prompt, offered actions) tree, alone (a kept entry does not depend
        on its batch), and kept with the critic's other features: the frozen model (adapter
        disabled) runs over the tree layout, from the tree's cached lower-layer states with
        ``lora_layers``.
        """
        keys = [
            ("tree", tuple(p), tuple(tuple(c) for c in group))
            for p, group in zip(prompt_ids, candidates)
        ]
        out: list[torch.Tensor] = []
        for r, key in enumerate(keys):
            rows = self._feature_cache.get(key)
            if rows is None:
                p, trie = prompt_ids[r], full_tries[r]
                tree = self._forest([p], [trie])
                positions = tree.positions.to(self.device)
                mask = self._layer_masks(
                    tree.additive_mask(self._mask_dtype(), self.device), positions
                )
                if self._reuse_from() > 0:
                    (lower,) = self._tree_lower_states([p], [candidates[r]], [trie])
                    with (
                        self._frozen_backbone(),
                        self._only_layers(self.first_adapted_layer) as top,
                    ):
                        hidden = top(
                            inputs_embeds=tree.gather([lower]),
                            attention_mask=mask,
                            position_ids=positions,
                            use_cache=False,
                        )
                else:
                    with self._frozen_backbone() as backbone:
                        hidden = backbone(
                            input_ids=tree.ids.to(self.device),
                            attention_mask=mask,
                            position_ids=positions,
                            use_cache=False,
                        )
                hidden = (
                    hidden.last_hidden_state if hasattr(hidden, "last_hidden_state") else hidden[0]
                )
                rows = hidden[0, len(p) - 1 : len(p) + len(trie[0])].float()
                self._feature_cache.put(key, rows)
            out.append(rows)
        return out

    def _fresh_critic_features(
        self, prompt_ids: list[list[int]], actions: list[list[int]]
    ) -> list[torch.Tensor]:
        """:meth:`critic_features` computed: per pair, its ``(len(action) + 1, H)`` rows."""
        sequences = [p + a for p, a in zip(prompt_ids, actions)]
        batch, width = len(sequences), max(len(a) for a in actions) + 1
        index = torch.zeros((batch, width), dtype=torch.long)
        for row, (p, a) in enumerate(zip(prompt_ids, actions)):
            index[row, : len(a) + 1] = torch.arange(len(p) - 1, len(p) + len(a))
        index = index.to(self.device)
        if self._reuse_from() > 0:
            # The layers below the adapters are the pre-trained ones: start from their cached
            # output (each sequence computed once) and run only the top layers frozen.
            lower, attention = self._padded_lower(sequences)
            with self._frozen_backbone(), self._only_layers(self.first_adapted_layer) as top:
                hidden = top(inputs_embeds=lower, attention_mask=attention, use_cache=False)
        else:
            ids, attention = self._right_padded(sequences)
            with self._frozen_backbone() as backbone:
                hidden = backbone(input_ids=ids, attention_mask=attention, use_cache=False)
        hidden = hidden.last_hidden_state if hasattr(hidden, "last_hidden_state") else hidden[0]
        features = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])).float()
        return [features[row, : len(a) + 1] for row, a in enumerate(actions)]


__all__ = ["UpdateFeatures"]
