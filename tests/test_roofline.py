"""benchmarks/roofline.py, whose figures go into docs/performance.md: its counts are the model's, its verdicts follow.

The weight counts must be the model's own parameters (the projections, the LM head, LoRA's A and B), a decode
step's bound the slower of its compute and memory roofs, and the fraction of the bound measured against the
seconds given; the benchmarks' target verdicts follow their thresholds.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


roofline = _load("roofline")


def test_weight_counts_are_the_models_parameters(tiny_model: str) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    shape = roofline.ModelShape.from_config(tiny_model, lora_rank=8)
    linears = sum(m.weight.numel() for name, m in model.model.layers.named_modules()
                  if name.endswith(("_proj",)) and hasattr(m, "weight"))
    assert shape.layer_weights == linears
    assert shape.head_weights == model.lm_head.weight.numel()
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert shape.lora_weights == sum(p.numel() for n, p in peft.named_parameters() if "lora_" in n)


def _machine(decode: float, chunk: float, bandwidth: float) -> roofline.Machine:
    return roofline.Machine(threads=2, decode_rows=16, chunk_rows=600, gemm_decode_gflops=decode,
                            gemm_chunk_gflops=chunk, bandwidth_gbs=bandwidth)


def test_a_decode_step_is_bound_by_the_slower_roof() -> None:
    shape = roofline.ModelShape(hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3, head_dim=64,
                                vocab=49152, lora_rank=16)
    counts = roofline.BatchCounts(rows=16, prompt_tokens=0, completion_tokens=16 * 100, decode_steps=100,
                                  prompt_length=0)
    weight_bytes = 4 * (shape.layer_weights + shape.head_weights)
    memory_bound = roofline.phase_work(shape, counts, _machine(1e6, 1e6, 20.0))["generation"]
    assert memory_bound.roof.startswith("memory") and memory_bound.bound_s >= 100 * weight_bytes / 20e9
    compute_bound = roofline.phase_work(shape, counts, _machine(1.0, 1e6, 1e6))["generation"]
    assert compute_bound.roof.startswith("compute")
    assert compute_bound.bound_s == pytest.approx(compute_bound.flops / 1e9, rel=1e-6)


def test_a_decode_steps_bytes_count_a_shared_prompts_keys_once() -> None:
    shape = roofline.ModelShape(hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3, head_dim=64,
                                vocab=49152, lora_rank=16)
    slow_memory = _machine(1e6, 1e6, 1.0)

    def decode_bytes(rows: int) -> float:  # 4 distinct prompts of 200 tokens, 100 new tokens per row
        counts = roofline.BatchCounts(rows=rows, prompt_tokens=4 * 200, completion_tokens=rows * 100,
                                      decode_steps=100, prompt_length=200)
        return roofline.phase_work(shape, counts, slow_memory)["generation"].bytes

    kv_per_token = 4 * 2 * 30 * 3 * 64
    # 4 more rows per prompt add their own completions' keys (50 tokens on average per step), not the prompts'
    assert decode_bytes(32) - decode_bytes(16) == pytest.approx(100 * 16 * 50 * kv_per_token)


def test_fractions_are_bound_over_measured_seconds() -> None:
    # Worked by hand from the module docstring's model, on a shape small enough to check on paper:
    # q width 2 x 4 = 8, kv width 4; projections (8, 8 + 2 x 4), (8, 8), (8, 2 x 16), (16, 8): 128 + 64 + 256 + 128
    # = 576 layer weights; head 8 x 10 = 80. LoRA rank 1 on q, k, v, o, gate, up, down: 16 + 12 + 12 + 16 + 24 + 24
    # + 24 = 128 adapter weights. Attention: 4 x tokens x context x 8 x 1 layer = 32 x tokens x context.
    shape = roofline.ModelShape(hidden=8, intermediate=16, layers=1, heads=2, kv_heads=1, head_dim=4, vocab=10,
                                lora_rank=1)
    # one prompt of 6 tokens, two rows of 4 new tokens: context 6 + 8 / 2 / 2 = 8
    counts = roofline.BatchCounts(rows=2, prompt_tokens=6, completion_tokens=8, decode_steps=4, prompt_length=6)
    machine = roofline.Machine(threads=1, decode_rows=2, chunk_rows=14, gemm_decode_gflops=1e-6,  # 1,000 FLOP/s
                               gemm_chunk_gflops=2e-6, bandwidth_gbs=1e-6)  # 2,000 FLOP/s, 1,000 B/s
    rows = roofline.roofline_rows(shape, counts, machine, {"generation": 20.0, "reference": 10.0,
                                                           "train_fwd_bwd": 40.0})
    by = {r["phase"]: r for r in rows}

    # generation: decode 2 x 656 x 8 + 32 x 8 x 8 = 12,544 FLOPs over 4 steps = 3,136 a step, 3.136 s of compute;
    # a step reads 4 x 656 weight bytes + 4 x 2 x 4 x (6 + 8 / 2) KV bytes = 2,944 B, 2.944 s: compute-bound.
    # Prefill 2 x 576 x 6 + 32 x 6 x 3 = 7,488 FLOPs at 2,000 FLOP/s = 3.744 s. Bound 4 x 3.136 + 3.744 = 16.288 s.
    generation = by["generation"]
    assert generation["roof"].startswith("compute")
    assert generation["bound_s"] == pytest.approx(16.288)
    assert generation["fraction"] == pytest.approx(16.288 / 20)
    assert generation["gflop"] == pytest.approx((12_544 + 7_488) / 1e9)
    assert generation["gflops"] == pytest.approx((12_544 + 7_488) / 20 / 1e9)
    assert generation["gbs"] == pytest.approx((4 * 2_944 + 4 * 656) / 20 / 1e9)
    # reference forward over 14 tokens: 2 x 576 x 14 + 2 x 80 x 8 scored + 32 x 14 x 8 = 20,992 FLOPs = 10.496 s
    assert by["reference"]["bound_s"] == pytest.approx(10.496)
    assert by["reference"]["fraction"] == pytest.approx(1.0496)
    # training: forward 20,992 + LoRA 2 x 128 x 14 = 3,584; backward 20,992 + 2 x 3,584 + 3,584 (attention again)
    # = 31,744; in all 56,320 FLOPs = 28.16 s
    assert by["train_fwd_bwd"]["gflop"] == pytest.approx(56_320 / 1e9)
    assert by["train_fwd_bwd"]["bound_s"] == pytest.approx(28.16)
    assert by["train_fwd_bwd"]["fraction"] == pytest.approx(28.16 / 40)


def test_the_target_verdicts_follow_the_thresholds() -> None:
    real_model = _load("real_model")
    runs = [{"workload": "4x4", "variant": v, "completions_per_s": c, "peak_rss_mb": m, "seed": 0}
            for v, c, m in (("ours", 0.9, 4000.0), ("trl", 0.3, 12000.0))]
    lines = {"4x4": {"ours": [{"phase": "generation", "fraction": 0.42}]}}
    verdicts = roofline.verdicts(runs, real_model.TARGETS, lines)
    assert "PASS 4x4: ours/trl completions/s 3.00x (target >= 2.7x)" in verdicts
    assert any(v.startswith("PASS 4x4: ours/trl peak RSS 0.33x") for v in verdicts)
    targets = [*real_model.TARGETS, ("4x4", "generation_bound", None, ">=", 0.5)]
    assert any(v.startswith("FAIL 4x4: ours' generation at 42%") for v in roofline.verdicts(runs, targets, lines))
    runs[0]["completions_per_s"] = 0.78
    assert any(v.startswith("FAIL 4x4: ours/trl completions/s 2.60x") for v in roofline.verdicts(runs, real_model.TARGETS, lines))


def test_batched_evaluation_sums_its_batches_and_batching_lowers_the_bound() -> None:
    shape = roofline.ModelShape(hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3, head_dim=64, vocab=49152)
    eval_module = _load("eval_throughput")
    prompts, completions = [20] * 8, [5, 9, 3, 7, 9, 9, 1, 4]
    machine = _machine(300.0, 400.0, 20.0)
    alone = eval_module.batches_work(prompts, completions, 1)
    assert [b.decode_steps for b in alone] == completions
    assert [b.decode_steps for b in eval_module.batches_work(prompts, completions, 4)] == [9, 9], "each batch's longest"
    one_by_one = roofline.generation_over_batches(shape, alone, machine)
    assert one_by_one.bound_s == pytest.approx(sum(roofline.phase_work(shape, b, machine)["generation"].bound_s
                                                   for b in alone))
    batched = roofline.generation_over_batches(shape, eval_module.batches_work(prompts, completions, 8), machine)
    assert batched.bound_s < one_by_one.bound_s / 3, "the weights read once per step for all rows, not once per row"


def test_an_sft_steps_counts_are_its_rendered_tokens(tiny_model: str) -> None:
    from hello_agents_rl.models import load_tokenizer

    sft = _load("sft_throughput")
    counts = sft.step_counts(0, load_tokenizer(tiny_model))
    rows = sft.WORKLOAD["batch_size"]
    # a chat-templated arithmetic question is tens of tokens, its worked answer about as many
    assert counts["rows"] == rows and 10 * rows < counts["prompt_tokens"] < 100 * rows
    assert 5 * rows < counts["completion_tokens"] < 100 * rows
    assert counts["prompt_length"] == pytest.approx(counts["prompt_tokens"] / rows, rel=0.1)
