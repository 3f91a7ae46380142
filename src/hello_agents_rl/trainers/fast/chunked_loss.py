"""The GRPO loss in chunks of whole groups, each backpropagated at once: activations for one chunk at a time.

Each chunk's loss is TRL's own on its rows, weighted so that the chunks add up to the whole-batch loss.
"""

from __future__ import annotations

from typing import Any

import torch

# Training rows scored together in one forward+backward: whole groups (a group shares its prompt) up to this many
# tokens (completion tokens, plus each distinct prompt once). Activations are kept for one chunk at a time instead
# of the whole batch; below it (short completions, small batches) the batch stays one piece, exactly as before.
LOSS_CHUNK_TOKENS = 1024
# On an accelerator one big batch keeps the device busy and memory is rarely what binds at these sizes: chunk only
# far larger batches there (not measured on a GPU yet; benchmarks/gpu_check.sh measures it).
LOSS_CHUNK_TOKENS_ACCELERATOR = 32768
# Per-row keys of TRL's generation batch the chunks may carry; anything else (images, tool masks of other
# shapes...) keeps TRL's whole-batch loss.
CHUNKABLE_KEYS = frozenset({
    "prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch",
    "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio",
    "tool_mask",
})
# How each loss type's whole-batch value splits into a sum over row chunks: "sum" (divided by a normaliser
# fixed for the batch: chunks add up exactly), "rows" (a mean over rows: weight rows_c / rows), "tokens"
# (a mean over the batch's tokens: weight tokens_c / tokens). Other loss types keep the whole-batch loss.
LOSS_SPLIT = {"dapo": "sum", "cispo": "sum", "grpo": "rows", "sapo": "rows", "dr_grpo": "rows", "bnpo": "tokens"}


def loss_chunks(inputs: dict[str, Any], budget: int) -> list[torch.Tensor] | None:
    """Row indices of each chunk: whole prompt groups, in order, up to `budget` tokens; None for one chunk."""
    prompts = inputs["prompt_ids"].masked_fill(inputs["prompt_mask"] == 0, -1)
    rows = prompts.size(0)
    _, group = torch.unique(prompts, dim=0, return_inverse=True)
    prompt_tokens = inputs["prompt_mask"].sum(dim=1).tolist()
    completion_tokens = inputs["completion_mask"].sum(dim=1).tolist()
    members: dict[int, list[int]] = {}
    for row, g in enumerate(group.tolist()):
        members.setdefault(g, []).append(row)
    chunks: list[list[int]] = []
    size = budget + 1
    for rows_of_group in members.values():
        cost = prompt_tokens[rows_of_group[0]] + sum(completion_tokens[r] for r in rows_of_group)
        if chunks and size + cost <= budget:
            chunks[-1] += rows_of_group
            size += cost
        else:
            chunks.append(list(rows_of_group))
            size = cost
    if len(chunks) < 2:
        return None
    device = inputs["prompt_ids"].device
    assert sum(len(c) for c in chunks) == rows
    return [torch.tensor(sorted(c), device=device) for c in chunks]


def combine_metrics(metrics: dict[str, list], before: dict[str, int], weights: list[float]) -> None:
    """Each chunk appended its own value of every metric: one value for the batch instead, weighted by tokens
    (TRL's metrics here are token means over the batch), min/max for the *_min/*_max ones."""
    total = sum(weights) or 1.0
    for key, values in metrics.items():
        new = values[before.get(key, 0):]
        if len(new) != len(weights) or len(new) < 2:
            continue
        if key.endswith("_min") or key.endswith("/min"):
            value = min(new)
        elif key.endswith("_max") or key.endswith("/max"):
            value = max(new)
        else:
            value = sum(v * w for v, w in zip(new, weights)) / total
        del values[before.get(key, 0):]
        values.append(value)



def token_budget(device: torch.device) -> int:
    """Tokens per chunk on this device (read at call time: benchmarks set LOSS_CHUNK_TOKENS)."""
    return LOSS_CHUNK_TOKENS if device.type == "cpu" else LOSS_CHUNK_TOKENS_ACCELERATOR
