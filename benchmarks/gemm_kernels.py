"""The fp32 matrix-product kernels this CPU offers, side by side at SmolLM2-135M's shapes: which one is fastest.

    python benchmarks/gemm_kernels.py [--threads 2] [--doc docs/performance.md] [--block kernels]

For a frozen weight W [out, in] and x [rows, in]: F.linear (MKL's GEMM, the weight re-packed on every call), MKL's
GEMM on the weight packed once, and oneDNN's on the weight packed once for it; GFLOP/s with the weight hot in cache
at a decode step's 16 rows and a training chunk's 608, then a decode step's projections streamed from memory (every
layer's weights, one call after another: GB/s of weights). The last line says which kernel
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
    kernels = list(roofline.products(torch.zeros(16, 1), 1))
    lines = [f"CPU vendor {cpu_vendor() or 'unknown'}, {args.threads} threads; GFLOP/s, weight hot in cache", "",
             f"{'rows':>5} {'in x out':>11} " + " ".join(f"{k:>9}" for k in kernels)]
    for rows in ROWS:
        for k, n in shapes:
            x, w = torch.randn(rows, k), torch.randn(n, k) * 0.05
            products = roofline.products(w, rows)
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
    lines += ["", f"a {rows}-row decode step's projections streamed from memory ({size / 1e6:.0f} MB), GB/s of "
              f"weights: " + ", ".join(streamed), "",
              f"frozen_gemm picks: {choose_kernel(cpu_vendor(), rows) or 'F.linear'} at {rows} rows, "
              f"{choose_kernel(cpu_vendor(), 1024) or 'F.linear'} at a scoring forward's 1024"]
    print("\n".join(lines))
    if args.doc:
        write_run_block(args.doc, args.block, ["```", *lines, "```"], started, launcher="python")


if __name__ == "__main__":
    main()
