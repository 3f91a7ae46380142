"""The GRPO loss in chunks of whole groups (trainers/fast/chunked_loss.py, docs/performance.md): the same loss, the same
gradients and the same logged metrics as plain TRL's whole-batch loss, for every loss type it splits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_fast_equivalence import _trainers

from hello_agents_rl.trainers.fast import chunked_loss

pytestmark = pytest.mark.slow


COMPANIONS = {"cispo": {"clip_range_high": 5.0}}  # what each loss type needs beside it (config/loss.py)


@pytest.mark.parametrize("loss_type", sorted(chunked_loss.LOSS_SPLIT))
def test_chunked_loss_equals_trls_whole_batch(tiny_model: str, tmp_path: Path, monkeypatch, loss_type: str) -> None:
    monkeypatch.setattr(chunked_loss, "LOSS_CHUNK_TOKENS", 1)  # every group its own chunk
    ours, theirs, rows = _trainers(tiny_model, tmp_path, monkeypatch, loss_type=loss_type,
                                   **COMPANIONS.get(loss_type, {}))
    torch.manual_seed(0)
    batch = ours._generate_and_score_completions(rows)
    assert len(chunked_loss.loss_chunks(batch, 1)) == 2, "two prompts: two chunks"
    results = []
    for trainer in (ours, theirs):
        trainer.model.zero_grad()
        for values in trainer._metrics["train"].values():
            values.clear()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()  # ours: a detached leaf (the chunks already backpropagated), as the Trainer calls it
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        metrics = {k: list(v) for k, v in trainer._metrics["train"].items() if v}
        results.append((loss.detach(), grads, metrics))
    (loss, grads, metrics), (trl_loss, trl_grads, trl_metrics) = results
    torch.testing.assert_close(loss, trl_loss, atol=1e-7, rtol=1e-5)
    assert grads.keys() == trl_grads.keys() and all(g.abs().sum() > 0 for g in trl_grads.values())
    for name, grad in trl_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)
    assert metrics.keys() == trl_metrics.keys()
    for key, values in trl_metrics.items():
        assert len(metrics[key]) == len(values) == 1, key
        assert metrics[key][0] == pytest.approx(values[0], rel=1e-4, abs=1e-6), key
    assert ours.fast_path["counts"]["loss_chunks"] == 2 and ours.fast_path["fallbacks"] == []


def test_small_batches_stay_one_piece(tiny_model: str, tmp_path: Path, monkeypatch) -> None:
    ours, _, rows = _trainers(tiny_model, tmp_path, monkeypatch)
    torch.manual_seed(0)
    batch = ours._generate_and_score_completions(rows)
    assert chunked_loss.loss_chunks(batch, chunked_loss.LOSS_CHUNK_TOKENS) is None, "a toy batch is far below the budget"
    ours.model.zero_grad()
    ours.compute_loss(ours.model, batch).backward()
    assert "loss_chunks" not in ours.fast_path["counts"]
