"""One training run, top to bottom: check the folder, load data and model, train, save, summarise."""

from __future__ import annotations

import gc
import math
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch

from hello_agents_rl.config import Thresholds, TrainConfig
from hello_agents_rl.data import sources as data_layer
from hello_agents_rl.distributed import from_main_process, is_main_process, world_size
from hello_agents_rl.models import (
    load_model,
    load_tokenizer,
    pick_device_dtype,
    recorded_prompt,
    system_prompt_of,
    with_recorded_prompt,
)
from hello_agents_rl.outputs import (
    METRICS,
    RESULTS,
    OutputPlan,
    atomic_write_json,
    checkpoints,
    claimed,
    json_ready,
    plan_output_dir,
    save_final_model,
)
from hello_agents_rl.rewards import build_reward, to_trl_reward
from hello_agents_rl.trainers import agent_run, tool_run
from hello_agents_rl.trainers.args import report_targets, vllm_context_length
from hello_agents_rl.trainers.build import build_trainer, training_arguments
from hello_agents_rl.trainers.callbacks import CompletionLogger, ConsoleProgress, RunMonitor
from hello_agents_rl.trainers.doctor import Doctor, sft_learnt_nothing
from hello_agents_rl.trainers.preflight import (
    check_chain_budget,
    check_fast_switches,
    check_lora_targets,
    check_schedule,
    check_sft_lengths,
    check_sft_targets,
    check_vllm_device,
    check_wandb_reachable,
)
from hello_agents_rl.trainers.run_safety import InterruptGuard, NonFiniteGuard, backoff


def train(cfg: TrainConfig, extra_callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Train; on CUDA out-of-memory shrink as the book advises and resume from the last checkpoint."""
    check_fast_switches()
    check_vllm_device(cfg)
    if tool_run.uses_tools(cfg):  # the chat template must express tool calls: checked before the disk or the model
        tool_run.preflight(cfg)
    plan = plan_output_dir(cfg.output_dir, cfg.resume_from_checkpoint, cfg.overwrite_output_dir)
    check_wandb_reachable(report_targets(cfg))
    changes: list[str] = []
    while True:
        try:
            with _no_empty_output_dir(Path(cfg.output_dir)), claimed(cfg.output_dir):  # one writer per folder
                result = _train_once(cfg, plan, extra_callbacks or [])
            break
        except torch.OutOfMemoryError:
            # one rank cannot shrink alone: the others would wait for it forever
            smaller = backoff(cfg) if cfg.oom_backoff and world_size() == 1 else None
            if smaller is None:
                raise
            cfg, change = smaller
            changes.append(change)
            print(f"[oom] out of memory: retrying with {change}", flush=True)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            found = checkpoints(cfg.output_dir)
            plan = OutputPlan(Path(cfg.output_dir), resume=str(found[-1]) if found else None)
    if changes:
        result["oom_backoff"] = changes
        result["diagnostics"].append(f"out of memory: backed off ({'; '.join(changes)})")
        _write_results(cfg, result)
    return result


@contextmanager
def _no_empty_output_dir(folder: Path) -> Iterator[None]:
    """A run that fails before it has saved anything leaves no folder behind, if it created that folder."""
    existed = folder.exists()
    try:
        yield
    except BaseException:
        worth_keeping = checkpoints(folder) or (folder / METRICS).exists() or (folder / RESULTS).exists()
        if not existed and folder.is_dir() and not worth_keeping and is_main_process():
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _train_once(cfg: TrainConfig, plan: OutputPlan, extra_callbacks: tuple[Any, ...] | list[Any] = ()) -> dict[str, Any]:
    from transformers.trainer_callback import ProgressCallback

    started, cpu_started = time.time(), time.process_time()
    device, dtype = pick_device_dtype(train_all_weights=not cfg.use_lora)
    cfg, prompt_source = with_recorded_prompt(cfg, cfg.model_name)  # the prompt the starting model was trained on
    train_data = data_layer.load(cfg)  # data and model errors surface before any file is written
    spec = agent_run.spec_of(cfg)  # a hello-agents agent: its prompts, schemas and tool messages
    if spec is not None and not spec.implicit:  # hello-agents Tools given as `tools`: the dataset's prompts
        train_data = agent_run.with_agent_prompts(train_data, spec)
    prompt = {"system_prompt": system_prompt_of(train_data), "enable_thinking": cfg.enable_thinking,
              **({"agent": agent_run.summary(spec)} if spec is not None else {})}
    # said before the model loads (a reward stuck at 0 has a named cause), and kept in result["diagnostics"]
    warnings = [agent_run.mismatch(recorded_prompt(cfg.model_name), prompt),
                spec.extras_warning() if spec is not None and not spec.implicit else None]
    check_schedule(cfg, len(train_data), world_size())
    check_sft_targets(cfg, train_data)
    tool_run.check_transcript_calls(cfg, train_data, spec)
    tool_run.check_environment(cfg, train_data)  # its reset on the first rows, before the model loads
    eval_data = _eval_data(cfg) if cfg.eval_steps else None
    tokenizer = load_tokenizer(cfg.model_name, cfg.trust_remote_code)
    check_sft_lengths(cfg, tokenizer, train_data)
    warnings = [w for w in (*warnings, check_chain_budget(cfg, tokenizer, train_data)) if w]
    for warning in warnings:
        print(f"[warning] {warning}", flush=True)
    if cfg.use_vllm and cfg.vllm_max_model_length is None:  # else vLLM reserves the model's whole context
        cfg = cfg.model_copy(update={"vllm_max_model_length": vllm_context_length(cfg, tokenizer, train_data)})
    bf16 = dtype == torch.bfloat16
    args = training_arguments(cfg, device, bf16)  # before the model: loading reads the distributed setup it makes
    model = load_model(cfg.model_name, cfg.trust_remote_code, dtype)
    check_lora_targets(cfg, model)
    plan.apply()  # only now, with data and model loaded, may an earlier run's files go
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    thresholds = Thresholds(**cfg.doctor_thresholds)
    monitor = RunMonitor(cfg.output_dir, Doctor(cfg.learning_rate, cfg.kl_coef, cfg.max_new_tokens, thresholds,
                                                use_lora=cfg.use_lora, dynamic_sampling=cfg.dynamic_sampling))
    nonfinite = NonFiniteGuard(cfg.skip_nonfinite_steps)
    interrupt = InterruptGuard()
    callbacks = [monitor, nonfinite, interrupt, *extra_callbacks]  # extra: e.g. the search's pruning reporter
    reward_fn = None
    if cfg.algorithm == "grpo" and tool_run.uses_tools(cfg):  # the answer after the last tool call, bounded shaping
        reward_fn = tool_run.trajectory_reward(cfg, spec)
    elif cfg.algorithm == "grpo":
        reward_fn = to_trl_reward(build_reward(cfg.reward_type, cfg.reward_config, answer_checker=cfg.answer_checker),
                                  cfg.reward_failure_value)
    trainer = build_trainer(cfg, model, tokenizer, train_data, eval_data, reward_fn, callbacks, device, bf16, args,
                            spec)
    if cfg.algorithm == "grpo":
        _add_grpo_callbacks(cfg, trainer)
        monitor.doctor.tools = tool_run.stats_of(trainer) if tool_run.uses_tools(cfg) else None  # hung tools
    trainable, total = _parameter_counts(trainer.model)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(ConsoleProgress())
    with interrupt.installed(), (spec.training() if spec is not None else nullcontext()):
        output = trainer.train(resume_from_checkpoint=plan.resume)
    broken = nonfinite.error or _nonfinite_weights(trainer.model)
    status = "interrupted" if interrupt.requested else "failed" if broken else "completed"
    model_path = ""
    if status == "completed":  # every rank: DeepSpeed/FSDP gather their shards to save; rank 0 writes
        model_path = save_final_model(trainer, cfg.output_dir, cfg.merge_lora, prompt)
    result = summarise(cfg, trainer, output, monitor, len(train_data), model_path, time.time() - started)
    # this process's CPU seconds, every thread's: the whole run's only where it did not resume (None then)
    result["train_cpu_s"] = None if plan.resume else round(time.process_time() - cpu_started, 2)
    if plan.resume:
        result["resumed_from"] = plan.resume
    result.update(status=status, trainable_parameters=trainable, total_parameters=total)
    if interrupt.requested:
        result["signal"] = interrupt.requested
    result["prompt"] = {**prompt, "source": prompt_source}
    result["diagnostics"].extend(warnings)
    if cfg.algorithm == "sft" and status == "completed" and (
            nothing := sft_learnt_nothing(result["final_loss"], len(tokenizer), thresholds)):
        print(f"[doctor] {nothing}", flush=True)
        result["diagnostics"].append(nothing)
    if broken:
        result["error"] = broken
        print(f"[stopped] {broken}", flush=True)
    if nonfinite.skipped_steps:
        result["skipped_nonfinite_steps"] = nonfinite.skipped_steps
    if tool_run.uses_tools(cfg) and cfg.algorithm == "grpo":
        result["tools"] = tool_run.tool_results(trainer, monitor.history)
    if reward_fn is not None and reward_fn.failures:
        result["reward_failures"] = reward_fn.failures
        fate = "left out of their groups" if cfg.reward_failure_value is None else f"scored {cfg.reward_failure_value}"
        result["diagnostics"].append(
            f"the reward failed on {reward_fn.failures} completions ({fate}); first error:\n{reward_fn.first_failure}"
        )
    if trainer.is_world_process_zero():
        _write_results(cfg, result)
    return from_main_process(trainer, result)  # only rank 0 saw the logs; every rank returns its result


def _add_grpo_callbacks(cfg: TrainConfig, trainer: Any) -> None:
    if cfg.kl_target is not None:
        from hello_agents_rl.trainers.adaptive_kl import AdaptiveKL

        trainer.add_callback(AdaptiveKL(trainer, *cfg.kl_target))
    if cfg.log_completions_steps:
        trainer.add_callback(CompletionLogger(trainer, cfg.output_dir, cfg.log_completions_steps))


def _nonfinite_weights(model: Any) -> str | None:
    """Weights that became NaN/inf (a finite but huge update can do it) are never saved as the final model."""
    bad = [name for name, p in model.named_parameters() if p.requires_grad and not torch.isfinite(p).all()]
    if not bad:
        return None
    return (f"{len(bad)} trainable weight tensors hold NaN/inf after training (first: {bad[0]}); the final model "
            "was not saved. Lower learning_rate, keep max_grad_norm on, and start again from the last good checkpoint")


def _write_results(cfg: TrainConfig, result: dict[str, Any]) -> None:
    atomic_write_json(Path(cfg.output_dir) / RESULTS, result)


def _parameter_counts(model: Any) -> tuple[int, int]:
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def _eval_data(cfg: TrainConfig) -> Any:
    subset = cfg.model_copy(update={"max_samples": cfg.eval_samples})
    return data_layer.load(subset, split=cfg.eval_split)


def public_config(cfg: TrainConfig) -> dict[str, Any]:
    """The run's parameters as JSON: a callable (a tool, a reward) by its qualified name, a Dataset by its type's."""
    return json_ready(cfg.model_dump())


def summarise(
    cfg: TrainConfig, trainer: Any, output: Any, monitor: RunMonitor, num_samples: int, model_path: str, runtime: float
) -> dict[str, Any]:
    logs = [e for e in monitor.history if "train_runtime" not in e and not any(k.startswith("eval_") for k in e)]

    def series(key: str) -> list[float]:
        return [e[key] for e in logs if isinstance(e.get(key), (int, float)) and math.isfinite(e[key])]

    rewards, kls, losses = series("reward"), series("kl"), series("loss")
    result: dict[str, Any] = {
        "status": "completed",
        "algorithm": cfg.algorithm,
        "model_path": model_path,
        "output_dir": str(cfg.output_dir),
        "num_samples": num_samples,
        "num_epochs": cfg.num_epochs,
        "num_steps": trainer.state.global_step,
        "final_loss": losses[-1] if losses else float(output.training_loss),
        "train_runtime_s": round(runtime, 2),
        "diagnostics": list(monitor.doctor.findings),
        "use_lora": cfg.use_lora,
        "config": public_config(cfg),
    }
    if cfg.algorithm == "grpo":
        result.update(
            average_reward=sum(rewards) / len(rewards) if rewards else 0.0,
            final_reward=rewards[-1] if rewards else 0.0,
            mean_kl=sum(kls) / len(kls) if kls else 0.0,
            final_kl=kls[-1] if kls else 0.0,
            kl_coef=float(getattr(trainer, "beta", cfg.kl_coef)),
            fast_path=getattr(trainer, "fast_path", None),  # which fast paths ran, every fallback and why
        )
    return result
