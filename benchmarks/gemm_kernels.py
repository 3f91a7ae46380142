"""The fp32 matrix-product kernels this CPU offers, side by side at SmolLM2-135M's shapes: which one is fastest.

    python benchmarks/gemm_kernels.py [--threads 2] [--doc docs/performance.md] [--block kernels]

For a frozen weight W [out, in] and x [rows, in]: F.linear (MKL's GEMM, the weight re-packed on every call), MKL's
GEMM on the weight packed once, and oneDNN's on the weight packed once for it; GFLOP/s with the weight hot in cache
at a decode step's 16 rows and a training chunk's 608, then a decode step's projections streamed from memory (every
layer's weights, one call after another: GB/s of weights), and, where this machine builds it, our streamed GEMM
(trainers/fast/sampling/streamed_gemm.py) against MKL's packed one, streamed, at 4-64 rows: the rows up to which the
sampler takes ours (streamed_gemm.MAX_ROWS). The last line says which kernel
hello_agents_rl/trainers/fast/sampling/frozen_gemm.py picks on this CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import roofline
from real_model_common import smollm2_gguf, write_run_block

ROWS = (16, 608)
SWEEP_ROWS = (4, 8, 16, 32, 64)


def streamed_by_rows(shape: roofline.ModelShape) -> list[str]:
    """GB/s of weights through a decode step's projections, streamed, on MKL's packed GEMM and on ours, by rows."""
    import torch

    from hello_agents_rl.trainers.fast.sampling import streamed_gemm

    if streamed_gemm.built()[0] is None:
        return [f"our streamed GEMM: {streamed_gemm.built()[1]}"]
    weights = [torch.randn(n, k) * 0.05 for _ in range(shape.layers) for k, n in shape.projections()]
    panels = [streamed_gemm.pack(w) for w in weights]
    size = sum(w.numel() * 4 for w in weights)
    lines = ["", f"streamed from memory, GB/s of weights: MKL's packed GEMM and ours by rows per product "
             f"(the sampler takes ours up to {streamed_gemm.MAX_ROWS})", "",
             f"{'rows':>5} {'mkl':>6} {'ours':>6} {'ours/mkl':>9}"]
    for rows in SWEEP_ROWS:
        inputs = {k: torch.randn(rows, k) for k, _ in shape.projections()}
        mkl = [(torch.ops.mkl._mkl_reorder_linear_weight(w, rows), w) for w in weights]
        mkl_s = roofline._best_seconds(lambda inputs=inputs, mkl=mkl, rows=rows: [
            torch.ops.mkl._mkl_linear(inputs[w.shape[1]], p, w, None, rows) for p, w in mkl], min_time=1.0)
        del mkl
        ours_s = roofline._best_seconds(lambda inputs=inputs: [streamed_gemm.linear(inputs[w.shape[1]], p, None)
                                                 for p, w in zip(panels, weights)], min_time=1.0)
        lines.append(f"{rows:>5} {size / mkl_s / 1e9:>6.1f} {size / ours_s / 1e9:>6.1f} {mkl_s / ours_s:>8.2f}x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--doc", help="write the output into this file's --block block")
    parser.add_argument("--block", default="kernels", help="the block's name (one per CPU vendor measured)")
    args = parser.parse_args()
    started = time.time()
    import torch

    from hello_agents_rl.models import resolve_model_source
    from hello_agents_rl.trainers.fast.sampling.frozen_gemm import choose_kernel, cpu_vendor

    torch.set_num_threads(args.threads)
    shape = roofline.ModelShape.from_config(resolve_model_source(smollm2_gguf()))
    shapes = shape.projections() + [(shape.hidden, roofline.HEAD_TILE)]
    kernels = list(roofline.products(torch.zeros(16, 1), 1))  # a panel-aligned weight: every kernel it has
    lines = [f"CPU vendor {cpu_vendor() or 'unknown'}, {args.threads} threads; GFLOP/s, weight hot in cache", "",
             f"{'rows':>5} {'in x out':>11} " + " ".join(f"{k:>9}" for k in kernels)]
    for rows in ROWS:
        for k, n in shapes:
            x, w = torch.randn(rows, k), torch.randn(n, k) * 0.05
            products = roofline.products(w, rows)  # ours only at a decode step's rows
            rates = [2.0 * rows * k * n / roofline._best_seconds(lambda f=products[kernel], x=x: f(x)) / 1e9
                     if kernel in products else None for kernel in kernels]
            lines.append(f"{rows:>5} {f'{k}x{n}':>11} " + " ".join(f"{r:>9.0f}" if r else f"{'-':>9}" for r in rates))
    rows = ROWS[0]
    weights = [torch.randn(n, k) * 0.05 for _ in range(shape.layers) for k, n in shape.projections()]
    inputs = {k: torch.randn(rows, k) for k, _ in shape.projections()}
    size = sum(w.numel() * 4 for w in weights)
    streamed = []
    for kernel in kernels:
        calls = [(roofline.products(w, rows)[kernel], inputs[w.shape[1]]) for w in weights]
        seconds = roofline._best_seconds(lambda calls=calls: [f(x) for f, x in calls], min_time=1.0)
        streamed.append(f"{kernel} {size / seconds / 1e9:.1f}")
        del calls
    aligned = weights[0]
    lines += ["", f"a {rows}-row decode step's projections streamed from memory ({size / 1e6:.0f} MB), GB/s of "
              f"weights: " + ", ".join(streamed), *streamed_by_rows(shape), "",
              f"frozen_gemm picks: {choose_kernel(cpu_vendor(), rows, aligned) or 'F.linear'} at {rows} rows, "
              f"{choose_kernel(cpu_vendor(), 1024, aligned) or 'F.linear'} at a scoring forward's 1024"]
    print("\n".join(lines))
    if args.doc:
        write_run_block(args.doc, args.block, ["```", *lines, "```"], started, launcher="python")


if __name__ == "__main__":
    main()
