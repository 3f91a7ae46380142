"""What the matrix-product kernels this CPU offers can do at SmolLM2-135M's shapes, against its memory.

    python benchmarks/gemm_limits.py [--threads 2] [--doc docs/performance.md]

Why generation stays under half of its roofline bound at a decode step's 16 rows. For 1 and --threads threads:

* the memory read rate (a sum over a 512 MiB tensor: benchmarks/roofline.py's memory roof) and the product rate
  with the weights hot in cache (its compute roof at 16 rows);
* a decode step's projections as the sampler runs them: every layer's weights, packed once for MKL's GEMM, one
  call after another, so that the weights come from memory (the streaming rate, as GB/s of weights);
* what a kernel would reach if it did its reading and its arithmetic one after the other rather than at once,
  1 / (1 / read rate + 1 / compute rate), both in weight bytes per second;
* the same stream with the weights in bf16, prepacked for oneDNN (AMX): half the bytes, other numbers;
* bf16x3 (three bf16 products, hi and lo parts of input and weight, accumulated in fp32: near-fp32 accuracy
  from bf16 units) against fp32 at a training chunk's 508 rows, with its relative error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import roofline
from real_model_common import smollm2_gguf, write_run_block

DECODE_ROWS, CHUNK_ROWS = 16, 508


def stream_rate(shape: roofline.ModelShape, dtype: str, threads: int) -> float:
    """GB/s of weights through one decode step's projections (all layers, packed once), weights from memory."""
    import torch

    torch.set_num_threads(threads)

    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    weights = [torch.randn(n, k).to(dt) for _ in range(shape.layers) for k, n in shape.projections()]
    inputs = {k: torch.randn(DECODE_ROWS, k).to(dt) for k, _ in shape.projections()}
    if dt is torch.float32:
        packed = [torch.ops.mkl._mkl_reorder_linear_weight(w, DECODE_ROWS) for w in weights]
        calls = [lambda w=w, p=p: torch.ops.mkl._mkl_linear(inputs[w.shape[1]], p, w, None, DECODE_ROWS)
                 for w, p in zip(weights, packed)]
    else:
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, DECODE_ROWS) for w in weights]
        calls = [lambda w=w, p=p: torch.ops.mkldnn._linear_pointwise(inputs[w.shape[1]], p, None, "none", [], "")
                 for w, p in zip(weights, packed)]
    seconds = roofline._best_seconds(lambda: [call() for call in calls], min_time=1.0)
    return sum(w.numel() * w.element_size() for w in weights) / seconds / 1e9


def bf16x3_rate(k: int, n: int, threads: int) -> tuple[float, float, float, float]:
    """(fp32 GFLOP/s, bf16x3 effective GFLOP/s, fp32 error, bf16x3 error) of x [CHUNK_ROWS, k] @ W^T [k, n]: the
    hi and lo parts as bf16-exact fp32 stacked along k, one product under oneDNN's bf16 math mode."""
    import torch

    torch.set_num_threads(threads)
    x, w = torch.randn(CHUNK_ROWS, k), torch.randn(n, k) * 0.05
    exact = x.double() @ w.double().t()

    def split(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hi = t.bfloat16().float()
        return hi, (t - hi).bfloat16().float()

    w_hi, w_lo = split(w)
    stacked = torch.cat([w_hi, w_hi, w_lo], 1).t().contiguous()  # once per run: a frozen weight

    def bf16x3() -> torch.Tensor:
        x_hi, x_lo = split(x)
        return torch.cat([x_hi, x_lo, x_hi], 1) @ stacked

    def error(y: torch.Tensor) -> float:
        return float((y.double() - exact).abs().max() / exact.abs().max())

    flops = 2.0 * CHUNK_ROWS * k * n
    fp32 = flops / roofline._best_seconds(lambda: x @ w.t()) / 1e9
    fp32_error = error(x @ w.t())
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    try:
        split_rate = flops / roofline._best_seconds(bf16x3) / 1e9
        split_error = error(bf16x3())
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = "ieee"
    return fp32, split_rate, fp32_error, split_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--doc", help="write the output into this file's gemm-limits block")
    args = parser.parse_args()
    started = time.time()
    from hello_agents_rl.models import resolve_model_source

    shape = roofline.ModelShape.from_config(resolve_model_source(smollm2_gguf()))
    lines = [f"SmolLM2-135M's projections ({shape.layers} layers, {shape.layer_weights * 4 / 1e6:.0f} MB of fp32 "
             f"weights), {DECODE_ROWS} rows per product (a 4x4 decode step); GB/s of weights read",
             "", f"{'threads':>7} {'memory':>7} {'compute':>8} {'fp32 stream':>12} {'of memory':>10} "
             f"{'read, then compute':>19} {'bf16 stream':>12} "
             f"{'bf16 weights/s':>15}"]
    for threads in sorted({1, args.threads}):
        memory = roofline.bandwidth(threads)
        compute = roofline.gemm_rate(DECODE_ROWS, shape.projections(), threads) * 4 / (2 * DECODE_ROWS)  # GB/s
        fp32, bf16 = stream_rate(shape, "fp32", threads), stream_rate(shape, "bf16", threads)
        serial = 1 / (1 / memory + 1 / compute)
        lines.append(f"{threads:>7} {memory:>7.1f} {compute:>8.1f} {fp32:>12.1f} {fp32 / memory:>9.0%} "
                     f"{serial:>19.1f} {bf16:>12.1f} "
                     f"{bf16 / 2 / (fp32 / 4):>14.2f}x")
    lines += ["", f"bf16x3 against fp32 at a training chunk's {CHUNK_ROWS} rows, {args.threads} threads:", "",
              f"{'shape':>12} {'fp32 GFLOP/s':>13} {'bf16x3 GFLOP/s':>15} {'fp32 error':>11} {'bf16x3 error':>13}"]
    for k, n in shape.projections():
        fp32, split, fp32_error, split_error = bf16x3_rate(k, n, args.threads)
        lines.append(f"{f'{k}x{n}':>12} {fp32:>13.0f} {split:>15.0f} {fp32_error:>11.1e} {split_error:>13.1e}")
    print("\n".join(lines))
    if args.doc:
        write_run_block(args.doc, "gemm-limits", ["```", *lines, "```"], started, launcher="python")


if __name__ == "__main__":
    main()
