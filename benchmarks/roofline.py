"""The machine's own limits, measured in the run that is judged against them, and each GRPO phase as a fraction.

Measured (fp32, the benchmark's torch threads): the matrix-product rate at the model's own projection shapes --
at a decode step's rows (the rollout batch) and at a training chunk's rows -- with the weights hot in cache (the
LM head as a 4,096-row slice of it), so that it is the compute roof; and the memory read bandwidth over a 512 MiB tensor, the memory roof.

Work is what the batch needs, not what an implementation does: each distinct prompt once, every completion token
once (the same for every variant, so a variant that recomputes shared prompts simply reaches a smaller fraction).
Per token, a forward costs 2 FLOPs per frozen weight it multiplies (the LM head only where a token is scored) plus
attention (4 x context x query width per layer); the training backward adds the input gradients (2 per weight)
and, for LoRA, the adapter's weight gradients; attention backward twice its forward. A decode step must read every
weight once, so its bound is max(FLOPs / compute roof, (weight + KV) bytes / bandwidth); the other phases reuse each
weight across hundreds of tokens and are bound by compute. A decode step also reads the KV cache: each distinct
prompt's keys and values once (a group's rows share them) and each row's own completion so far.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from child_runs import median

BANDWIDTH_BYTES = 512 * 2**20


@dataclass
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    lora_rank: int = 0  # LoRA on every linear layer of the decoder (the tool's all-linear default); 0: none

    @classmethod
    def from_config(cls, model_dir: str | Path, lora_rank: int = 0) -> ModelShape:
        c = json.loads(Path(model_dir, "config.json").read_text())
        heads = c["num_attention_heads"]
        return cls(hidden=c["hidden_size"], intermediate=c["intermediate_size"], layers=c["num_hidden_layers"],
                   heads=heads, kv_heads=c.get("num_key_value_heads") or heads,
                   head_dim=c.get("head_dim") or c["hidden_size"] // heads, vocab=c["vocab_size"], lora_rank=lora_rank)

    def projections(self) -> list[tuple[int, int]]:
        """(in, out) of one layer's matrix products, q/k/v and gate/up fused as the sampler runs them."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return [(self.hidden, q + 2 * kv), (q, self.hidden), (self.hidden, 2 * self.intermediate),
                (self.intermediate, self.hidden)]

    @property
    def layer_weights(self) -> int:
        return self.layers * sum(k * n for k, n in self.projections())

    @property
    def head_weights(self) -> int:
        return self.hidden * self.vocab

    @property
    def lora_weights(self) -> int:  # A (r x in) and B (out x r) of q, k, v, o, gate, up, down in every layer
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        pairs = [(self.hidden, q), (self.hidden, kv), (self.hidden, kv), (q, self.hidden),
                 (self.hidden, self.intermediate), (self.hidden, self.intermediate), (self.intermediate, self.hidden)]
        return self.layers * self.lora_rank * sum(k + n for k, n in pairs)

    def attention_flops(self, tokens: float, context: float) -> float:
        return 4.0 * tokens * context * self.heads * self.head_dim * self.layers


@dataclass
class Machine:
    threads: int
    decode_rows: int
    chunk_rows: int
    gemm_decode_gflops: float  # at decode_rows rows, the model's shapes, weights in cache
    gemm_chunk_gflops: float  # at chunk_rows rows
    bandwidth_gbs: float


def _best_seconds(fn: Any, min_time: float = 0.25, repeats: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        calls, started = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - started
            if elapsed >= min_time / repeats:
                break
        best = min(best, elapsed / calls)
    return best


def products(w: Any, rows: int) -> dict[str, Any]:
    """x -> x W^T on every fp32 kernel this torch build offers: F.linear (the weight re-packed on every call), and
    MKL's and oneDNN's GEMM on the weight packed once for each."""
    import torch
    import torch.nn.functional as F

    from hello_agents_rl.trainers.fast.sampling.frozen_gemm import PackedWeight

    out = {"F.linear": lambda x: F.linear(x, w)}
    for kernel, there in (("mkl", torch._C.has_mkl), ("onednn", torch.backends.mkldnn.is_available())):
        if there:
            out[kernel] = PackedWeight(w, rows, kernel)
    return out


def gemm_rate(rows: int, shapes: list[tuple[int, int]], threads: int) -> float:
    """GFLOP/s of x [rows, in] @ W^T (nn.Linear's layout), summed over `shapes`, each weight hot in cache: the
    fastest of `products` (the roof is the machine's, not one kernel's: MKL is the faster on Intel, oneDNN
    elsewhere)."""
    import torch

    torch.set_num_threads(threads)
    flops = seconds = 0.0
    for k, n in shapes:
        x, w = torch.randn(rows, k), torch.randn(n, k)
        seconds += min(_best_seconds(lambda f=f, x=x: f(x)) for f in products(w, rows).values())
        flops += 2.0 * rows * k * n
    return flops / seconds / 1e9


def bandwidth(threads: int) -> float:
    """GB/s read by a sum over BANDWIDTH_BYTES of float32 (best of several)."""
    import torch

    torch.set_num_threads(threads)
    x = torch.ones(BANDWIDTH_BYTES // 4)
    return BANDWIDTH_BYTES / _best_seconds(lambda: x.sum(), min_time=1.0) / 1e9


HEAD_TILE = 4096  # the LM head's rows timed for the compute roof: its whole weight cannot stay in cache


def measure(shape: ModelShape, decode_rows: int, chunk_rows: int, threads: int) -> Machine:
    shapes = shape.projections() + [(shape.hidden, min(shape.vocab, HEAD_TILE))]
    return Machine(threads, decode_rows, chunk_rows, gemm_rate(decode_rows, shapes, threads),
                   gemm_rate(chunk_rows, shapes, threads), bandwidth(threads))


@dataclass
class BatchCounts:
    """What one optimizer step's batch holds (recorded from the rollout)."""

    rows: int  # completions
    prompt_tokens: int  # each distinct prompt once
    completion_tokens: int
    decode_steps: int  # the longest completion: the batch decodes until every row is done
    prompt_length: float  # mean distinct-prompt length

    @classmethod
    def of(cls, distinct_prompt_lengths: list[int], completion_lengths: list[int]) -> BatchCounts:
        """A batch that decodes until its longest completion ends."""
        prompts = distinct_prompt_lengths
        return cls(rows=len(completion_lengths), prompt_tokens=sum(prompts), completion_tokens=sum(completion_lengths),
                   decode_steps=max(completion_lengths, default=0), prompt_length=sum(prompts) / max(len(prompts), 1))

    def context(self) -> float:
        return self.prompt_length + self.completion_tokens / max(self.rows, 1) / 2


@dataclass
class PhaseWork:
    flops: float
    bytes: float
    bound_s: float
    roof: str


def phase_work(shape: ModelShape, counts: BatchCounts, machine: Machine) -> dict[str, PhaseWork]:
    """The FLOPs, bytes and lower-bound seconds of one step's generation, reference pass and training."""
    w_bytes = 4.0 * (shape.layer_weights + shape.head_weights)
    ctx = counts.context()
    tokens = counts.prompt_tokens + counts.completion_tokens
    decode_flops = 2.0 * (shape.layer_weights + shape.head_weights) * counts.completion_tokens
    decode_flops += shape.attention_flops(counts.completion_tokens, ctx)
    prefill_flops = 2.0 * shape.layer_weights * counts.prompt_tokens
    prefill_flops += shape.attention_flops(counts.prompt_tokens, counts.prompt_length / 2)
    step_flops = decode_flops / max(counts.decode_steps, 1)
    kv_tokens = counts.prompt_tokens + counts.completion_tokens / 2  # per step on average, shared prompts once
    kv_bytes = 4.0 * 2 * shape.layers * shape.kv_heads * shape.head_dim * kv_tokens
    step_bound = max(step_flops / (machine.gemm_decode_gflops * 1e9), (w_bytes + kv_bytes) / (machine.bandwidth_gbs * 1e9))
    memory_bound = (w_bytes + kv_bytes) / (machine.bandwidth_gbs * 1e9) >= step_flops / (machine.gemm_decode_gflops * 1e9)
    generation = PhaseWork(
        flops=decode_flops + prefill_flops,
        bytes=counts.decode_steps * (w_bytes + kv_bytes) + w_bytes,
        bound_s=counts.decode_steps * step_bound + prefill_flops / (machine.gemm_chunk_gflops * 1e9),
        roof="memory (weights per decode step)" if memory_bound else "compute (decode GEMM)",
    )
    forward = 2.0 * shape.layer_weights * tokens + 2.0 * shape.head_weights * counts.completion_tokens
    forward += shape.attention_flops(tokens, ctx)
    chunk_rate = machine.gemm_chunk_gflops * 1e9
    reference = PhaseWork(forward, w_bytes, forward / chunk_rate, "compute (chunk GEMM)")
    lora = 2.0 * shape.lora_weights * tokens
    backward = forward + 2 * lora + shape.attention_flops(tokens, ctx)  # input grads; LoRA weight grads
    training = PhaseWork(forward + lora + backward, 2 * w_bytes, (forward + lora + backward) / chunk_rate,
                         "compute (chunk GEMM)")
    return {"generation": generation, "reference": reference, "train_fwd_bwd": training}


def phase_row(phase: str, work: PhaseWork, seconds: float) -> dict:
    """One phase's measured seconds, achieved GFLOP/s and GB/s, the bound and the fraction of it reached."""
    return {"phase": phase, "seconds": seconds, "gflop": work.flops / 1e9,
            "gflops": work.flops / seconds / 1e9 if seconds else 0.0, "gbs": work.bytes / seconds / 1e9 if seconds else 0.0,
            "bound_s": work.bound_s, "roof": work.roof, "fraction": work.bound_s / seconds if seconds else 0.0}


def roofline_rows(shape: ModelShape, counts: BatchCounts, machine: Machine, seconds: dict[str, float]) -> list[dict]:
    """Per GRPO phase: measured seconds, achieved GFLOP/s and GB/s, the bound and the fraction of it reached."""
    return [phase_row(phase, work, seconds.get(phase, 0.0)) for phase, work in phase_work(shape, counts, machine).items()]


def generation_over_batches(shape: ModelShape, batches: list[BatchCounts], machine: Machine) -> PhaseWork:
    """The generation work of batches run one after another (batched evaluation): their sums."""
    works = [phase_work(shape, counts, machine)["generation"] for counts in batches]
    roofs = {w.roof for w in works}
    return PhaseWork(sum(w.flops for w in works), sum(w.bytes for w in works), sum(w.bound_s for w in works),
                     roofs.pop() if len(roofs) == 1 else "mixed: " + " / ".join(sorted(roofs)))


VECTOR_EXTENSIONS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "asimd", "sve")


def cpu() -> dict[str, Any]:
    """The CPU a speed figure holds for: its model, the vector extensions that change torch's kernels, the kernel
    level torch picked, and the cores. Recorded beside every run, since a ratio to plain TRL moves with them."""
    import platform

    import torch

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "unknown")()
    return {"model": fields.get("model name") or platform.processor() or platform.machine(),
            "extensions": [flag for flag in VECTOR_EXTENSIONS if flag in flags], "torch_kernels": capability,
            "cores": os.cpu_count()}


def cpu_line(host: dict[str, Any] | None) -> str:
    """`host` (cpu()) in words; an older record without one says so."""
    if not host:
        return "CPU not recorded"
    return (f"{host['model']}, {host['cores']} cores, {', '.join(host['extensions']) or 'no AVX2'}"
            f" (torch kernels: {host['torch_kernels']})")


def machine_line(machine: Machine) -> str:
    return (f"{cpu_line(cpu())}: fp32 matrix products at the model's shapes: {machine.gemm_decode_gflops:.0f} GFLOP/s at "
            f"{machine.decode_rows} rows (a decode step), {machine.gemm_chunk_gflops:.0f} GFLOP/s at "
            f"{machine.chunk_rows} rows (a training chunk); memory read bandwidth {machine.bandwidth_gbs:.1f} GB/s; "
            f"{machine.threads} torch threads")


def markdown(rows_by_variant: dict[str, list[dict]], seconds: str = "s/step") -> str:
    lines = [f"| variant | phase | {seconds} | GFLOP | achieved GFLOP/s | achieved GB/s | bound s | roof "
             "| fraction of bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    for variant, rows in rows_by_variant.items():
        for r in rows:
            lines.append(f"| {variant} | {r['phase']} | {r['seconds']:.3g} | {r['gflop']:.3g} | {r['gflops']:.3g} "
                         f"| {r['gbs']:.3g} | {r['bound_s']:.3g} | {r['roof']} | {100 * r['fraction']:.0f}% |")
    return "\n".join(lines)


def as_dict(machine: Machine) -> dict[str, Any]:
    return asdict(machine)


def mean_counts(batches: list[dict]) -> BatchCounts:
    """The mean of several batches' counts (each a dict of BatchCounts' fields)."""
    return BatchCounts(**{k: statistics.fmean(b[k] for b in batches) for k in batches[0]})


def by_variant(results: list[dict], workload: str, shape: ModelShape,
                        machine: Machine) -> dict[str, list[dict]]:
    """Each variant's phases against the bound: per run, then the median of each figure over the rounds."""
    out: dict[str, list[dict]] = {}
    for variant in dict.fromkeys(r["variant"] for r in results if r["workload"] == workload and "failed" not in r):
        runs = [roofline_rows(shape, mean_counts(r["batches"]), machine, r["split_s_per_step"])
                for r in results if r["workload"] == workload and r["variant"] == variant and "failed" not in r]
        out[variant] = [{**phase, **{k: statistics.median(run[i][k] for run in runs)
                                     for k in phase if k not in ("phase", "roof")}}
                        for i, phase in enumerate(runs[0])]
    return out


def verdicts(results: list[dict], targets: list[tuple], lines: dict[str, dict[str, list[dict]]]) -> list[str]:
    """Each of a benchmark's targets -- (workload, "speedup" | "rss" | "generation_bound", baseline variant, ">=" or
    "<=", threshold) -- that this run measured, as PASS or FAIL with its figure."""
    out = []
    for workload, what, baseline, sense, threshold in targets:
        ours = [r for r in results if r["workload"] == workload and r["variant"] == "ours" and "failed" not in r]
        if not ours:
            continue
        if what == "generation_bound":
            value = next(r["fraction"] for r in lines[workload]["ours"] if r["phase"] == "generation")
            label = f"{workload}: ours' generation at {100 * value:.0f}% of its bound"
        else:
            base = [r for r in results if r["workload"] == workload and r["variant"] == baseline]
            ok = [r for r in base if "failed" not in r]
            if not base:
                continue
            key = "completions_per_s" if what == "speedup" else "peak_rss_mb"
            if not ok:  # the baseline never finished a step (did not fit): no ratio to report
                out.append(f"FAIL (unmeasured) {workload}: {baseline} failed in every round")
                continue
            value = median(ours, key) / median(ok, key)
            label = f"{workload}: ours/{baseline} {'completions/s' if what == 'speedup' else 'peak RSS'} {value:.2f}x"
        passed = value >= threshold if sense == ">=" else value <= threshold
        out.append(f"{'PASS' if passed else 'FAIL'} {label} (target {sense} {threshold:g}"
                   f"{'x' if what != 'generation_bound' else ''})")
    return out
