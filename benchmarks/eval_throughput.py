"""Evaluation throughput: our batched rollout loop (what `evaluate` runs) vs one prompt at a time (the old tool's loop).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/eval_throughput.py --repeats 3 --doc docs/performance.md

Greedy answers to the 250 held-out arithmetic questions from the SFT'd tiny Qwen3 that
grpo_throughput.py prepares (built on first use), max_new_tokens 32. Variants, alternated in-process:

* one_at_a_time -- for each question: tokenize, `model.generate(max_new_tokens, greedy)`, decode
                   (what the old hello-agents tool did);
* batched_32    -- `hello_agents_rl.rollouts.loop.roll_out`, batch_size 32 (EvaluateConfig's default);
* batched_125   -- the same with 125 questions per batch (what the demo uses);
* lean_125      -- the GRPO fast sampler (trainers/fast/sampling/) greedy, 125 per batch: not wired into
                   `evaluate` (shown for what it would add).

Reported: questions/s (wall and CPU), accuracy of each (they must agree), and ratios to one_at_a_time; and the
roofline of each (benchmarks/roofline.py): the machine measured in this run at each variant's batch rows, the work
of generating the fast sampler's greedy completions (each prompt once, each new token once) in batches of that
size, one after another. --doc writes it all into a markdown block.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import roofline

BATCH_ROWS = {"one_at_a_time": 1, "batched_32": 32, "batched_125": 125, "lean_125": 125}


def batches_work(prompt_lengths: list[int], completion_lengths: list[int], size: int) -> list[roofline.BatchCounts]:
    """The questions in batches of `size`, in order: each batch decodes until its longest completion ends."""
    return [roofline.BatchCounts.of(prompt_lengths[start : start + size], completion_lengths[start : start + size])
            for start in range(0, len(prompt_lengths), size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--questions", type=int, default=250)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--workdir", default=os.environ.get("HELLO_AGENTS_BENCH_DIR", "/tmp/hello_agents_bench"))
    parser.add_argument("--doc", default="", help="write the table and the roofline into this markdown file "
                        "(the block between its eval-speed markers)")
    args = parser.parse_args()
    started = time.time()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from grpo_throughput import prepare

    from hello_agents_rl.models import load_model, load_tokenizer
    from hello_agents_rl.rewards import is_correct
    from hello_agents_rl.rollouts.loop import roll_out
    from hello_agents_rl.tasks.arithmetic import make_dataset
    from hello_agents_rl.tasks.formatting import render_prompt
    from hello_agents_rl.trainers.fast.sampling import sample

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = prepare(workdir)
    tokenizer, model = load_tokenizer(model_path), load_model(model_path).eval()
    rows = list(make_dataset("test", None, 0))[: args.questions]
    prompts = [render_prompt(tokenizer, row["prompt"]) for row in rows]
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    n_new = args.max_new_tokens

    @torch.no_grad()
    def one_at_a_time() -> list[str]:
        answers = []
        for prompt in prompts:
            inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
            out = model.generate(**inputs, max_new_tokens=n_new, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            answers.append(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
        return answers

    def batched(size: int) -> Callable[[], list[str]]:
        return lambda: [r[0].trajectory.final_text for r in roll_out(model, tokenizer, rows, n_new, batch_size=size)]

    completion_lengths: list[int] = []  # the fast sampler's greedy completions, in tokens: the work's measure

    def lean(size: int) -> Callable[[], list[str]]:
        def run() -> list[str]:
            answers = []
            completion_lengths.clear()
            for start in range(0, len(prompts), size):
                ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts[start : start + size]]
                completions, _ = sample(model, ids, n_new, [eos], tokenizer.pad_token_id, temperature=0.0)
                answers += tokenizer.batch_decode(completions, skip_special_tokens=True)
                completion_lengths.extend(map(len, completions))
            return answers
        return run

    variants: dict[str, Callable[[], list[str]]] = {
        "one_at_a_time": one_at_a_time, "batched_32": batched(32), "batched_125": batched(125), "lean_125": lean(125),
    }
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    accuracy: dict[str, float] = {}
    for rep in range(args.repeats):
        for name in list(variants) if rep % 2 == 0 else list(variants)[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            answers = variants[name]()
            timings[name].append((time.perf_counter() - wall, time.process_time() - cpu))
            accuracy[name] = sum(is_correct(a, row["ground_truth"]) for a, row in zip(answers, rows)) / len(rows)
    n = len(prompts)
    base_wall = statistics.median(t[0] for t in timings["one_at_a_time"])
    base_cpu = statistics.median(t[1] for t in timings["one_at_a_time"])
    head = f"{'variant':<14} {'questions/s':>11} {'q/cpu-s':>8} {'vs one-at-a-time':>17} {'(cpu)':>6} {'accuracy':>9}"
    lines = [f"{n} questions, greedy, max_new_tokens {n_new}, {args.repeats} repeats (medians)", head, "-" * len(head)]
    for name, ts in timings.items():
        wall = statistics.median(t[0] for t in ts)
        cpu = statistics.median(t[1] for t in ts)
        lines.append(f"{name:<14} {n / wall:>11.1f} {n / cpu:>8.1f} {base_wall / wall:>16.2f}x {base_cpu / cpu:>5.2f}x "
                     f"{accuracy[name]:>9.3f}")
    summary = "\n".join(lines)
    shape = roofline.ModelShape.from_config(model_path)
    prompt_lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    prompt_length = round(statistics.fmean(prompt_lengths))
    machines = {size: roofline.measure(shape, size, size * prompt_length, torch.get_num_threads())
                for size in sorted(set(BATCH_ROWS.values()))}
    rows = {name: [roofline.phase_row("evaluation", roofline.generation_over_batches(
                shape, batches_work(prompt_lengths, completion_lengths, BATCH_ROWS[name]), machines[BATCH_ROWS[name]]),
                statistics.median(t[0] for t in timings[name]))] for name in timings}
    machine_lines = [f"* {size} rows: {roofline.machine_line(m)}" for size, m in machines.items()]
    roofs = roofline.markdown(rows, seconds=f"s ({n} questions)")
    print(summary, "", "Roofline (medians over repeats):", *machine_lines, "", roofs, sep="\n")
    if args.doc:
        from real_model_common import write_run_block

        write_run_block(args.doc, "eval-speed", ["```", summary, "```", "", "Roofline (benchmarks/roofline.py: the "
                                                 "machine measured in this run at each variant's batch rows):", "",
                                                 *machine_lines, "", roofs], started)

if __name__ == "__main__":
    main()
