"""Dynamic sampling: groups whose completions all scored the same are left out of the step (DAPO; verl's
filter_groups). TRL has no such option; this is a subclass of the GRPO trainer, around TRL's own batch building.

Such a group's advantages are all zero: it costs a reference forward and a training forward and backward, and
with a KL term only pulls the policy back. TRL builds a batch in `_generate_and_score_completions`: generate, the
old-policy and reference forwards, then the rewards and advantages. Here the rewards are computed right after
generation (`_generate`) -- once: TRL's own reward call then gets the same values -- so the no-grad forwards that
follow run on the varied groups only, and those groups alone leave the batch.

- skip: the step trains on the groups that remain (none left: the step makes no update), every one of them: they
  are split over the round's micro-steps in whole groups (`group_chunks`), not in TRL's equal row counts.
- resample: new prompts from the training set refill the batch, round after round, until it holds as many groups
  as a plain step or `rounds` rounds (the first included) have run; each refill draws as many prompts as the
  missing groups need at the keep rate seen so far in this step, at most a full batch. Refill prompts are drawn
  from (seed, step, round): a resumed run draws what the uninterrupted one would have.

Logged per step (console, metrics.jsonl, TensorBoard): dynamic_sampling/zero_variance_fraction (of all groups
generated this step) and dynamic_sampling/groups_trained; resample also dynamic_sampling/rounds. One process
only (trainers/preflight.py): a group may span processes. The TRL internals used are listed in
coupling.py (DYNAMIC_SAMPLING_METHODS) and checked when the trainer is built.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from trl import GRPOTrainer

from hello_agents_rl.coupling import DYNAMIC_SAMPLING_ATTRIBUTES, dynamic_sampling_blocker
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.trajectory import varied

TrlGRPOTrainer: Any = GRPOTrainer  # typed loosely: TRL's attributes are Optional until its __init__ sets them

# Per-row tensors of TRL's batch padded on the left (prompts) and the value right-padded ones are filled with.
LEFT_PADDED = ("prompt_ids", "prompt_mask")
PAD_VALUE = {"tool_mask": 1}  # TRL pads tool masks with 1; completion_ids take the pad token, the rest 0


def varied_groups(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int) -> torch.Tensor:
    """Per row: does its group's summed reward vary (trajectory.varied, the one zero-variance test)? Rewards as TRL
    sums them: weighted, NaN = unscored."""
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    groups = rewards.view(-1, group).tolist()  # [B][G]
    keep = [varied([None if math.isnan(r) else r for r in row]) for row in groups]
    return torch.tensor(keep, dtype=torch.bool, device=rewards.device).repeat_interleave(group)


def rows_of(batch: dict[str, Any]) -> int:
    return batch["completion_ids"].size(0)


def take_rows(batch: dict[str, Any], index: torch.Tensor) -> dict[str, Any]:
    """The batch's rows at `index`; num_items_in_batch recounted over them (it normalises the dapo/cispo loss)."""
    rows = rows_of(batch)
    out = {}
    for key, value in batch.items():
        if torch.is_tensor(value) and value.dim() > 0 and value.size(0) == rows:
            out[key] = value[index.to(value.device)]
        elif isinstance(value, list) and len(value) == rows:
            out[key] = [value[i] for i in index.tolist()]
        else:
            out[key] = value
    mask = out["completion_mask"] if out.get("tool_mask") is None else out["completion_mask"] * out["tool_mask"]
    out["num_items_in_batch"] = mask.sum()
    return out


def group_chunks(batch: dict[str, Any], group: int, steps: int) -> list[dict[str, Any]]:
    """`steps` batches of whole groups, in a random group order (TRL shuffles the rows), sizes differing by at most
    one group; each keeps the whole batch's num_items_in_batch, as TRL's split does."""
    order = torch.randperm(rows_of(batch) // group)
    chunks = []
    for part in range(steps):
        groups = order[part::steps]
        index = (groups[:, None] * group + torch.arange(group)).flatten()
        chunks.append({**take_rows(batch, index), "num_items_in_batch": batch["num_items_in_batch"]})
    return chunks


def join(first: dict[str, Any], second: dict[str, Any], pad_token_id: int) -> dict[str, Any]:
    """Two batches as one: per-row tensors padded to the wider one's width (prompts on the left)."""
    out = {}
    for key, a in first.items():
        b = second.get(key)
        if not torch.is_tensor(a) or a.dim() == 0:
            out[key] = a
        elif a.dim() == 1:
            out[key] = torch.cat([a, b])
        else:
            width = max(a.size(1), b.size(1))
            fill = pad_token_id if key in ("prompt_ids", "completion_ids") else PAD_VALUE.get(key, 0)
            left = key in LEFT_PADDED
            out[key] = torch.cat([F.pad(t, (width - t.size(1), 0) if left else (0, width - t.size(1)), value=fill)
                                  for t in (a, b)])
    mask = out["completion_mask"] if out.get("tool_mask") is None else out["completion_mask"] * out["tool_mask"]
    out["num_items_in_batch"] = mask.sum()
    return out


class DynamicSampling(TrlGRPOTrainer):
    """GRPO that leaves out groups whose rewards are all equal (dynamic_sampling="skip") or samples more rounds to
    fill the batch with varied ones ("resample"); composed over the run's trainer in trainers/build.py."""

    def __init__(self, *args: Any, dynamic_sampling: str = "skip", dynamic_sampling_rounds: int = 4,
                 **kwargs: Any) -> None:
        problem = dynamic_sampling_blocker(GRPOTrainer)
        if problem:
            raise ConfigError(f"`dynamic_sampling`: {problem}. Fix: dynamic_sampling: off")
        self._ds_mode, self._ds_rounds = dynamic_sampling, dynamic_sampling_rounds
        self._ds_round: dict[str, Any] | None = None  # the generation round in progress
        super().__init__(*args, **kwargs)
        missing = [name for name in DYNAMIC_SAMPLING_ATTRIBUTES if not hasattr(self, name)]
        if missing:
            raise ConfigError(f"`dynamic_sampling`: TRL's trainer has no {missing[0]} any more (renamed?). "
                              "Fix: dynamic_sampling: off")

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.model.training:  # evaluation scores every group, as TRL does
            return super()._generate_and_score_completions(inputs)
        group = self.num_generations
        target = len(inputs) // group
        batch, generated, kept = self._scored_round(inputs)
        used = {repr(row["prompt"]) for row in inputs}
        rounds = 1
        while self._ds_mode == "resample" and kept < target and rounds < self._ds_rounds:
            rate = kept / generated if kept else 1 / target
            wanted = min(target, math.ceil((target - kept) / rate))
            refill = self._refill(wanted, rounds, used)
            if not refill:
                break  # every prompt of the training set is in this step already
            more, more_generated, more_kept = self._scored_round(refill)
            batch = join(batch, more, self._tokenizer.pad_token_id) if rows_of(batch) else more
            generated, kept, rounds = generated + more_generated, kept + more_kept, rounds + 1
        rows = min(rows_of(batch), target * group)  # whole groups: both are multiples of the group
        batch = take_rows(batch, torch.arange(rows))
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/zero_variance_fraction"].append(1 - kept / generated)
        metrics["dynamic_sampling/groups_trained"].append(rows // group)
        if self._ds_mode == "resample":
            metrics["dynamic_sampling/rounds"].append(rounds)
        return batch

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        """TRL's, except how a generation round's batch is split over its steps_per_generation micro-steps:
        in whole groups, as evenly as they go (TRL cuts equal row counts and drops the rest, so a kept batch of
        3 groups over 4 steps would train none, or cut a group in half); a micro-step with no group left
        makes no update (compute_loss)."""
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        steps = self.args.steps_per_generation
        buffered: list[dict[str, Any]] | None = self._buffered_inputs  # type: ignore[has-type]  # TRL's, untyped
        if self._step % (steps * self.num_iterations) == 0 or buffered is None:
            buffered = group_chunks(self._generate_and_score_completions(generation_batch), self.num_generations,
                                    steps)
            self._buffered_inputs = buffered
        return buffered[self._step % steps]

    def _scored_round(self, inputs: list[dict[str, Any]]) -> tuple[dict[str, Any], int, int]:
        """TRL's batch for `inputs`, its varied groups only: (batch, groups generated, groups kept)."""
        self._ds_round = {"inputs": inputs}
        try:
            batch = super()._generate_and_score_completions(inputs)
            keep = self._ds_round.get("keep")
        finally:
            self._ds_round = None
        if keep is None or keep.numel() != rows_of(batch):
            raise RuntimeError("dynamic_sampling: TRL built the batch without the generation step it hooks "
                               "(coupling.py: DYNAMIC_SAMPLING_METHODS)")
        group = self.num_generations
        batch = take_rows(batch, keep.nonzero().squeeze(1))
        return batch, keep.numel() // group, int(keep.sum()) // group

    def _refill(self, prompts: int, round_index: int, used: set[str]) -> list[dict[str, Any]]:
        """`prompts` training rows not yet in this step, each repeated for its group, drawn from (seed, step,
        round) so that a resumed run draws the same."""
        seed = (self.args.seed * 1_000_003 + self.state.global_step * 1_009 + round_index) % 2**63
        order = torch.randperm(len(self.train_dataset), generator=torch.Generator().manual_seed(seed))
        picked = []
        for i in order.tolist():
            row = self.train_dataset[i]
            if repr(row["prompt"]) not in used:
                used.add(repr(row["prompt"]))
                picked.append(row)
                if len(picked) == prompts:
                    break
        return [row for row in picked for _ in range(self.num_generations)]

    def _generate(self, prompts: list) -> tuple:
        result = super()._generate(prompts)
        current = self._ds_round
        if current is not None and "keep" not in current:
            completion_ids, completions = result[1], result[3]
            rewards = super()._calculate_rewards(current["inputs"], prompts, completions, completion_ids)
            current.update(completions=completions, rewards=rewards,
                           keep=varied_groups(rewards, self.reward_weights, self.num_generations))
        return result

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        current = self._ds_round
        if current is not None and current.get("completions") is completions:
            return current["rewards"]  # computed once, right after generation
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                           batch_size=None, compute_entropy=False, compute_aux_loss=False,
                                           **extra):
        keep = (self._ds_round or {}).get("keep")
        if (keep is None or torch.is_grad_enabled() or compute_entropy or keep.numel() != input_ids.size(0)
                or bool(keep.all()) or any(v is not None for v in extra.values())):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **extra)
        # the reference and old-policy forwards of a round: the varied groups' rows only
        index = keep.nonzero().squeeze(1).to(input_ids.device)
        logps = torch.zeros(input_ids.size(0), logits_to_keep, device=input_ids.device)
        if index.numel():
            part, _, _ = super()._get_per_token_logps_and_entropies(
                model, input_ids[index], attention_mask[index], logits_to_keep, batch_size, False,
                compute_aux_loss, **extra)
            logps = logps.to(part.dtype)
            logps[index] = part
        return logps, None, None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if rows_of(inputs) == 0:  # every group of this step scored alike: nothing to learn, no update
            return torch.zeros((), device=inputs["completion_ids"].device, requires_grad=True)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
