"""FastGRPOTrainer: TRL's GRPOTrainer with the fast path's sampler, forwards and chunked loss.

Where each part of ours applies is decided in gate.py, what runs is engine.py's; anywhere else TRL's own method
runs, with the reason recorded (record.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from trl import GRPOTrainer
from trl.extras.profiling import profiling_context

from hello_agents_rl.trainers.fast import chunked_loss, engine, gate
from hello_agents_rl.trainers.fast.allocator import keep_freed_memory
from hello_agents_rl.trainers.fast.buckets import length_buckets
from hello_agents_rl.trainers.fast.dropout import use_fast_dropout
from hello_agents_rl.trainers.fast.record import FastPathRecord


class FastGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer; only rollouts, per-token log-prob forwards and the loss's chunking differ, each falling
    back to TRL's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._fast_record = FastPathRecord()
        self._train_forward = engine.TrainForward(self._fast_record)
        # checked before anything of ours touches TRL/PEFT internals; outside them this is plain GRPOTrainer
        self._fast_off = gate.class_blocker(GRPOTrainer)
        super().__init__(*args, **kwargs)
        self._fast_off = self._fast_off or gate.run_blocker(self, GRPOTrainer)
        if self._fast_off:
            self._fast_record.fell_back("all", self._fast_off)
            return
        self._fast_record.ran("fast_dropout_layers", use_fast_dropout(self.model))
        if self.accelerator.device.type == "cpu" and keep_freed_memory() is None:
            self._fast_record.ran("malloc_reuse")  # else glibc's defaults, as in any other process

    @property
    def fast_path(self) -> dict[str, Any]:
        """Which paths ran, how often, and every fallback with its reason (JSON-ready)."""
        return self._fast_record.as_dict()

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        blocker = "" if self._fast_off else gate.sampler_blocker(self, images, multimodal_fields, has_tool_images)
        completion_ids = None
        if blocker is None:
            with profiling_context(self, "fast.sample"):
                completion_ids, blocker = engine.sample(
                    self.accelerator.unwrap_model(self.model), self.generation_config, prompt_ids,
                    self.max_completion_length, list(self.eos_token_ids), self._tokenizer.pad_token_id,
                    self._fast_record)
        if completion_ids is None:
            if blocker:  # "" = the whole fast path is off, already reported once
                self._fast_record.fell_back("sampler", blocker, len(prompt_ids))
            self._fast_record.ran("generate_completions", len(prompt_ids))
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        # TRL's generate path returns no log-probs (its loss uses the training forward's): ours would become the
        # batch's sampling_per_token_logps, which TRL's off-policy mask (OPSM) then reads instead
        return completion_ids, None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **extra):
        unwrapped = self.accelerator.unwrap_model(model)
        blocker = "" if self._fast_off else gate.forward_blocker(self, model, unwrapped, compute_aux_loss, extra)
        if blocker is not None:
            if blocker:
                self._fast_record.fell_back("forward", blocker)
            self._fast_record.ran("trl_forwards")
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **extra)
        decoder = engine.scorer(unwrapped, compute_entropy)  # the reference (adapter off), eval forwards
        batch_size = batch_size or input_ids.size(0)
        prompt_len = input_ids.size(1) - logits_to_keep
        lengths = attention_mask[:, prompt_len:].sum(dim=1).tolist()
        parts, order = [], []
        for rows, width in length_buckets(lengths):
            # each bucket padded to its own longest completion, not the batch's (right padding: exact)
            width = max(width, 1)
            for start in range(0, len(rows), batch_size):
                index = torch.tensor(rows[start : start + batch_size], device=input_ids.device)
                ids = input_ids[index, : prompt_len + width]  # [r, P + width]
                mask = attention_mask[index, : prompt_len + width]
                with self.accelerator.autocast():
                    if decoder is not None:
                        with profiling_context(self, "fast.score"):
                            part = (engine.score(decoder, ids, mask, width, self.temperature, self._fast_record),
                                    None)
                    else:
                        part = self._train_forward(unwrapped, ids, mask, width, self.temperature, compute_entropy)
                if part is None:  # no prompt repeats in these rows (data, not a fallback): TRL's own forward
                    part = super()._get_per_token_logps_and_entropies(
                        model, ids, mask, width, None, compute_entropy)[:2]
                parts.append(tuple(None if t is None else F.pad(t, (0, logits_to_keep - width)) for t in part))
                order.append(index)
        restore = torch.argsort(torch.cat(order))
        logps = torch.cat([p[0] for p in parts])[restore]  # [R, C]
        entropies = torch.cat([p[1] for p in parts])[restore] if compute_entropy else None
        return logps, entropies, None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """TRL's loss, computed and backpropagated one chunk of whole groups at a time when the batch is big:
        the same loss and gradients (each chunk's loss is TRL's own on its rows, weighted so that the chunks add
        up to the whole-batch loss), activations for one chunk instead of all rows. The gradients are already in
        .grad when this returns; the returned loss is a detached leaf, so the Trainer's own backward adds
        nothing."""
        blocker = "" if self._fast_off or return_outputs else gate.chunk_blocker(self, model, inputs)
        budget = chunked_loss.token_budget(inputs["prompt_ids"].device)
        chunks = chunked_loss.loss_chunks(inputs, budget) if blocker is None else None
        if chunks is None:
            if blocker:  # "" = the whole fast path is off (already reported)
                self._fast_record.fell_back("loss chunks", blocker)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        split = chunked_loss.LOSS_SPLIT[self.loss_type]
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        rows, tokens = mask.size(0), mask.sum().clamp(min=1.0)
        metrics = self._metrics["train" if self.model.training else "eval"]
        before = {key: len(values) for key, values in metrics.items()}
        total, weights = None, []
        for index in chunks:
            part = {k: (v if k == "num_items_in_batch" or v is None else v[index]) for k, v in inputs.items()}
            part_tokens = mask[index].sum()
            loss = super().compute_loss(model, part, False, num_items_in_batch)
            if split == "rows":
                loss = loss * (len(index) / rows)
            elif split == "tokens":
                loss = loss * (part_tokens.clamp(min=1.0) / tokens)
            self.accelerator.backward(loss)  # this chunk's activations are freed here
            total = loss.detach() if total is None else total + loss.detach()
            weights.append(float(part_tokens))
        chunked_loss.combine_metrics(metrics, before, weights)
        self._fast_record.ran("loss_chunks", len(chunks))
        return total.requires_grad_()

