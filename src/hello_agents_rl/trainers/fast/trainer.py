"""FastGRPOTrainer: TRL's GRPOTrainer with the lean sampler, shared-prompt and functional forwards, chunked loss.

Each replacement checks, every time it runs, whether it reproduces TRL here, and otherwise calls TRL's own method
with the reason recorded (record.py). Before any of it: the switch, versions and device (verified.py) and the TRL
internals it relies on (coupling.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from hello_agents_rl import speedups
from hello_agents_rl.rollouts.sampling import (SCORE_PACK_ROWS, Unsupported, fast_decoder_or_reason, no_active_dropout,
                                              sample, sampler_settings, score)
from hello_agents_rl.trainers.fast import chunked_loss
from hello_agents_rl.trainers.fast.allocator import keep_freed_memory
from hello_agents_rl.trainers.fast.buckets import length_buckets
from hello_agents_rl.trainers.fast.coupling import class_blocker, instance_blocker
from hello_agents_rl.trainers.fast.dropout import use_fast_dropout
from hello_agents_rl.trainers.fast.lora_forward import LoraTrainView
from hello_agents_rl.trainers.fast.record import FastPathRecord
from hello_agents_rl.trainers.fast.shared_prefix import shared_prefix_blocker, shared_prefix_logps
from hello_agents_rl.trainers.fast.verified import ENV_SWITCH, device_blocker, enabled, version_blocker
from hello_agents_rl.trainers.fast.vocab_tile import cpu_vocab_tile

def fast_grpo_trainer_class() -> type:
    """GRPOTrainer with the lean sampler and shared-prompt forwards (TRL imported lazily, like the package)."""
    from trl import GRPOTrainer
    from trl.extras.profiling import profiling_context

    class FastGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer; only rollouts and per-token log-prob forwards differ, each falling back to TRL's."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._fast_record = FastPathRecord()
            # checked before anything of ours touches TRL/PEFT internals; outside them this is plain GRPOTrainer
            self._fast_off = version_blocker() or class_blocker(GRPOTrainer)
            super().__init__(*args, **kwargs)
            self._fast_off = (
                self._fast_off
                or device_blocker(self.accelerator.device.type)
                or instance_blocker(self, GRPOTrainer)
            )
            if self._fast_off:
                self._fast_record.fell_back("all", self._fast_off)
            else:
                self._fast_record.ran("fast_dropout_layers", use_fast_dropout(self.model))
                if self.accelerator.device.type == "cpu" and keep_freed_memory() is None:
                    self._fast_record.ran("malloc_reuse")  # else glibc's defaults, as in any other process
                    if speedups.on("malloc_no_mmap"):
                        self._fast_record.ran("malloc_no_mmap")

        @property
        def fast_path(self) -> dict[str, Any]:
            """Which paths ran, how often, and every fallback with its reason (JSON-ready)."""
            return self._fast_record.as_dict()

        def _fast_generation_blocker(self, images: Any, multimodal_fields: Any) -> str | None:
            args = self.args
            checks = [
                (not enabled(), f"{ENV_SWITCH}=0"),
                (self.use_vllm, "use_vllm"),
                (self.use_transformers_continuous_batching, "continuous batching"),
                (bool(images) or bool(multimodal_fields), "multimodal prompts"),
                (self.is_deepspeed_enabled or self.is_fsdp_enabled, "DeepSpeed/FSDP"),
                (bool(args.generation_kwargs), "generation_kwargs"),
                (args.cache_implementation is not None, "cache_implementation"),
                (self._is_vlm, "vision-language model"),
            ]
            return next((reason for blocked, reason in checks if blocked), None)

        def _get_per_token_logps_and_entropies(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **extra,
        ):
            if self._fast_off:
                self._fast_record.ran("trl_forwards")
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **extra
                )
            unwrapped = self.accelerator.unwrap_model(model)
            blocker = (
                (self.is_deepspeed_enabled or self.is_fsdp_enabled) and "DeepSpeed/FSDP"
            ) or shared_prefix_blocker(unwrapped, compute_aux_loss, extra)
            if not blocker and unwrapped is not model and torch.is_grad_enabled():
                blocker = "DDP-wrapped model"  # two forwards per backward through DDP's reducer: not here
            if blocker:
                self._fast_record.fell_back("forward", blocker)
                self._fast_record.ran("trl_forwards")
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **extra
                )
            decoder = None
            if not torch.is_grad_enabled() and not compute_entropy and no_active_dropout(unwrapped):
                # the reference (adapter off), eval forwards
                decoder, _ = fast_decoder_or_reason(unwrapped, pack_rows=SCORE_PACK_ROWS)
            batch_size = batch_size or input_ids.size(0)
            prompt_len = input_ids.size(1) - logits_to_keep
            lengths = attention_mask[:, prompt_len:].sum(dim=1).tolist()
            parts, order = [], []
            for rows, width in length_buckets(lengths):
                # each bucket padded to its own longest completion, not the batch's (right padding: exact)
                width = max(width, 1)
                for start in range(0, len(rows), batch_size):
                    index = torch.tensor(rows[start : start + batch_size], device=input_ids.device)
                    ids = input_ids[index, : prompt_len + width]
                    mask = attention_mask[index, : prompt_len + width]
                    with self.accelerator.autocast(), cpu_vocab_tile(ids.device.type):
                        if decoder is not None:
                            with profiling_context(self, "fast.score"):
                                part = (score(decoder, ids, mask, width, self.temperature), None)
                            self._fast_record.ran("functional_scores")
                        else:
                            part = self._functional_logps(unwrapped, ids, mask, width, compute_entropy)
                            if part is not None:
                                self._fast_record.ran("functional_train_forwards")
                            else:
                                part = shared_prefix_logps(unwrapped, ids, mask, width, compute_entropy)
                                self._fast_record.ran("shared_prompt_forwards" if part is not None else "trl_forwards")
                    if part is None:  # no prompt repeats in these rows (data, not a fallback): TRL's own forward
                        with cpu_vocab_tile(ids.device.type):
                            part = super()._get_per_token_logps_and_entropies(
                                model, ids, mask, width, None, compute_entropy)[:2]
                    parts.append(tuple(None if t is None else F.pad(t, (0, logits_to_keep - width)) for t in part))
                    order.append(index)
            restore = torch.argsort(torch.cat(order))
            logps = torch.cat([p[0] for p in parts])[restore]
            entropies = torch.cat([p[1] for p in parts])[restore] if compute_entropy else None
            return logps, entropies, None

        def _functional_logps(self, model: Any, ids: torch.Tensor, mask: torch.Tensor, width: int,
                              compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None] | None:
            """The LoRA forward as one function (lora_forward.py) where it applies, else None (the module path)."""
            if ids.device.type != "cpu" or not speedups.on("functional_forward"):
                return None
            blocker = getattr(self, "_lora_view_blocker", None)
            if blocker:  # this policy cannot have one (full fine-tuning, several adapters...): decided once
                self._fast_record.passed_over("functional forward", blocker)
                return None
            view = getattr(self, "_lora_view", None)
            if view is None or view.stale():
                try:
                    view = self._lora_view = LoraTrainView(model)
                except Unsupported as why:
                    self._lora_view_blocker = str(why)
                    self._fast_record.passed_over("functional forward", str(why))
                    return None
            try:
                return view.logps(ids, mask, width, self.temperature, compute_entropy)
            except Unsupported as why:
                self._fast_record.passed_over("functional forward", str(why))
                return None

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            """TRL's loss, computed and backpropagated one chunk of whole groups at a time when the batch is big:
            the same loss and gradients (each chunk's loss is TRL's own on its rows, weighted so that the chunks
            add up to the whole-batch loss), activations for one chunk instead of all rows. The gradients are
            already in .grad when this returns; the returned loss is a detached leaf, so the Trainer's own
            backward adds nothing."""
            blocker = "" if self._fast_off or return_outputs else chunked_loss.chunk_blocker(self, model, inputs)
            budget = chunked_loss.token_budget(inputs["prompt_ids"].device)
            chunks = chunked_loss.loss_chunks(inputs, budget) if blocker is None else None
            if chunks is None:
                if blocker:  # "" = the whole fast path is off (already reported)
                    self._fast_record.fell_back("loss chunks", blocker)
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            split = chunked_loss.LOSS_SPLIT[self.loss_type]
            mask = inputs["completion_mask"] if inputs.get("tool_mask") is None else inputs["completion_mask"] * inputs["tool_mask"]
            rows, tokens = mask.size(0), mask.sum().clamp(min=1.0)
            mode = "train" if self.model.training else "eval"
            metrics = self._metrics[mode]
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

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            if self._fast_off:
                blocker: str | None = ""  # the whole fast path is off, reported once at start
            else:
                blocker = self._fast_generation_blocker(images, multimodal_fields)
                blocker = blocker or ("tool images" if has_tool_images else None)
            decoder, settings = None, {}
            if blocker is None:
                model = self.accelerator.unwrap_model(self.model)
                settings, blocker = sampler_settings(model, self.generation_config)
            if blocker is None:
                decoder, blocker = fast_decoder_or_reason(model, pack_rows=len(prompt_ids))
            if blocker is not None:
                if blocker:  # "" = the whole fast path is off, already reported once
                    self._fast_record.fell_back("sampler", blocker, len(prompt_ids))
                self._fast_record.ran("generate_completions", len(prompt_ids))
                return super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )
            with profiling_context(self, "fast.sample"):
                completion_ids, _ = sample(
                    model,
                    prompt_ids,
                    max_new_tokens=self.max_completion_length,
                    eos_token_ids=list(self.eos_token_ids),
                    pad_token_id=self._tokenizer.pad_token_id,
                    decoder=decoder,
                    with_logprobs=False,  # TRL's generate path hands none either (see below)
                    **settings,
                )
            if "stream" in decoder.kernels():
                self._fast_record.ran("streamed_gemm", len(prompt_ids))
            del decoder  # frees the merged weights before the training forward
            self._fast_record.ran("sampler_completions", len(prompt_ids))
            # TRL's generate path returns no log-probs (its loss uses the training forward's): ours would become
            # the batch's sampling_per_token_logps, which TRL's off-policy mask (OPSM) then reads instead
            return completion_ids, None

    return FastGRPOTrainer
