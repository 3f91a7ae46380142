"""Two processes on this CPU machine (gloo), launched as a user would: `accelerate launch`.

GRPO with LoRA from a Python script (RLTrainingTool), SFT from the command line. Each rank leaves
evidence behind (scripts/dist_probe.py): the result it returned, the examples it was fed, the
prompts its reward scored and its trainable weights after training.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "scripts" / "dist_probe.py"
ACCELERATE_CONFIGS = ROOT / "configs" / "accelerate"
CPU_2PROC = ACCELERATE_CONFIGS / "cpu_2proc.yaml"

GRPO = {
    "action": "train", "algorithm": "grpo", "dataset": "arithmetic", "max_samples": 16, "num_epochs": 1,
    "batch_size": 2, "num_generations": 4, "max_new_tokens": 16, "temperature": 1.0, "learning_rate": 5e-3,
    "logging_steps": 1, "save_steps": 2, "warmup_ratio": 0.0, "use_lora": True, "lora_rank": 8, "lora_alpha": 16,
    "record_prompts": True,  # the probe's reward: a length score that also records each prompt it sees
}
SFT = {
    "algorithm": "sft", "dataset": "arithmetic", "max_samples": 32, "num_epochs": 1, "batch_size": 4,
    "learning_rate": 1e-3, "use_lora": True, "lora_rank": 8, "lora_alpha": 16, "merge_lora": True,
    "logging_steps": 1, "save_steps": 100, "warmup_ratio": 0.0,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(args: list[str], cwd: Path, config: Path = CPU_2PROC, **extra_env: str) -> str:
    """accelerate launch with 2 processes, no mixed precision; returns stdout+stderr of all ranks together."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", WANDB_MODE="offline",
               PYTHONUNBUFFERED="1", **extra_env)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes", "2",
               "--mixed_precision", "no", "--main_process_port", str(_free_port()), *args]
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both ranks
        output, _ = proc.communicate()
        pytest.fail(f"accelerate launch timed out:\n{output[-6000:]}")
    assert proc.returncode == 0, output[-6000:]
    return output


def _steps_logged(output: str, total: int) -> list[int]:
    return [int(s) for s in re.findall(rf"Epoch \d+/\d+ \| Step (\d+)/{total}\b", output)]


def _seen(dump: Path, rank: int, kind: str) -> list[str]:
    rows = [json.loads(line) for line in (dump / f"seen-rank{rank}.jsonl").read_text().splitlines()]
    return [json.dumps(r["value"]) for r in rows if r["kind"] == kind]


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def grpo_run(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    work = tmp_path_factory.mktemp("dist_grpo")
    out, dump = work / "grpo_out", work / "dump"
    (work / "params.json").write_text(json.dumps({**GRPO, "model_name": tiny_model, "output_dir": str(out)}))
    return _launch([str(PROBE), str(dump), str(work / "params.json")], work), out, dump


@pytest.fixture(scope="module")
def sft_run(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    work = tmp_path_factory.mktemp("dist_sft")
    out, dump = work / "sft_out", work / "dump"
    (work / "run.yaml").write_text(yaml.safe_dump({**SFT, "model_name": tiny_model, "output_dir": str(out)}))
    # the command line (hello_agents_rl.interfaces.cli.main) under the probe; `-m hello_agents_rl.interfaces.cli` runs the same main().
    # The final save takes the DeepSpeed/FSDP branch: every rank saves, rank 0 merges the saved adapter.
    args = [str(PROBE), str(dump), "--cli", "train", "--config", "run.yaml", "--report_to", "none"]
    return _launch(args, work, PROBE_COLLECTIVE_SAVE="1"), out, dump


# --- GRPO + LoRA from a Python script ----------------------------------------------------------------


@pytest.mark.slow
def test_grpo_every_rank_returns_rank0s_result(grpo_run: tuple) -> None:
    _, out, dump = grpo_run
    results = [json.loads((dump / f"result-rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0] == results[1]
    result = results[0]
    assert result["status"] == "completed" and result["model_path"] == str(out / "model")
    assert result["num_steps"] == 4, "16 prompts / (2 prompts per device x 2 processes)"
    logged = [m for m in _metrics(out) if "reward" in m]
    assert result["average_reward"] == pytest.approx(sum(m["reward"] for m in logged) / len(logged))
    assert result["diagnostics"] == [d for m in logged for d in m.get("diagnostics", [])], "the doctor's findings, once"
    assert json.loads((out / "results.json").read_text()) == result


@pytest.mark.slow
def test_grpo_ranks_trained_on_different_prompts(grpo_run: tuple) -> None:
    _, _, dump = grpo_run
    scored = [_seen(dump, r, "reward_prompt") for r in (0, 1)]
    for prompts in scored:
        assert len(prompts) == 4 * 2 * 4, "4 steps x 2 prompts x 4 completions on each rank"
        assert all(prompts.count(p) == 4 for p in prompts), "a prompt's whole group lives on one rank"
    assert not set(scored[0]) & set(scored[1]), "the ranks share no prompt"
    assert len(set(scored[0]) | set(scored[1])) == 16, "together they covered the 16 prompts once"


@pytest.mark.slow
def test_grpo_trainable_weights_identical_on_both_ranks(grpo_run: tuple) -> None:
    _, out, dump = grpo_run
    rank0, rank1 = (load_file(str(dump / f"weights-rank{r}.safetensors")) for r in (0, 1))
    assert rank0.keys() == rank1.keys() and all("lora_" in k for k in rank0)
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), "DDP keeps the replicas in step"
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in rank0.items()), "the adapter learned something"
    saved = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert all(torch.equal(saved[k], rank0[k.replace(".weight", ".default.weight")]) for k in saved)


@pytest.mark.slow
def test_grpo_files_and_log_lines_written_once(grpo_run: tuple) -> None:
    output, out, _ = grpo_run
    assert _steps_logged(output, 4) == [1, 2, 3, 4], "rank 0 alone prints the console line"
    steps = [m["step"] for m in _metrics(out) if "train_runtime" not in m]
    assert steps == [1, 2, 3, 4], "metrics.jsonl: one line per logged step, not one per rank"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert {p.name for p in (out / "checkpoint-4").glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert not list(out.glob(".final*")), "no staging folder left behind"
    doctor = re.findall(r"\[doctor\] .*", output)
    assert len(doctor) == len(set(doctor)), "doctor findings printed once"


# --- SFT from the command line -------------------------------------------------------------------------


@pytest.mark.slow
def test_sft_cli_prints_once_and_returns_the_same_result(sft_run: tuple) -> None:
    output, out, dump = sft_run
    assert output.count('"status": "completed"') == 1, "the result JSON is printed by rank 0 only"
    assert _steps_logged(output, 4) == [1, 2, 3, 4]
    results = [json.loads((dump / f"result-rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0] == results[1] == json.loads((out / "results.json").read_text())
    assert results[0]["num_steps"] == 4, "32 examples / (4 per device x 2 processes)"
    assert [m["step"] for m in _metrics(out) if "loss" in m] == [1, 2, 3, 4]


@pytest.mark.slow
def test_sft_ranks_fed_different_examples_and_stay_identical(sft_run: tuple) -> None:
    _, out, dump = sft_run
    fed = [_seen(dump, r, "batch") for r in (0, 1)]
    assert len(fed[0]) == len(fed[1]) == 16 and fed[0] != fed[1]
    assert Counter(fed[0]) + Counter(fed[1]) == Counter(_seen(dump, 0, "dataset")), "each example once, on one rank"
    rank0, rank1 = (load_file(str(dump / f"weights-rank{r}.safetensors")) for r in (0, 1))
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in rank0.items())


@pytest.mark.slow
def test_sft_collective_save_writes_adapter_and_merged_model(sft_run: tuple, tiny_model: str) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    _, out, dump = sft_run
    trained = load_file(str(dump / "weights-rank0.safetensors"))
    adapter = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert adapter and all(torch.equal(v, trained[k.replace(".weight", ".default.weight")]) for k, v in adapter.items())
    merged = AutoModelForCausalLM.from_pretrained(str(out / "model"))
    expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), str(out / "adapter"))
    expected = expected.merge_and_unload().state_dict()
    assert all(torch.allclose(v, expected[k], atol=1e-6) for k, v in merged.state_dict().items())
    base = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    assert any(not torch.equal(v, base[k]) for k, v in merged.state_dict().items()), "the merge changed weights"
    assert not list(out.glob(".final*")) and (out / "model" / "tokenizer_config.json").is_file()


# --- fast checks -----------------------------------------------------------------------------------------


def test_shipped_accelerate_configs_load() -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    expected = {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp2": "FSDP",
                "multi_node": "MULTI_GPU", "cpu_2proc": "MULTI_GPU"}
    for name, kind in expected.items():
        config = load_config_from_file(str(ACCELERATE_CONFIGS / f"{name}.yaml"))
        assert str(config.distributed_type).endswith(kind), name
    assert load_config_from_file(str(ACCELERATE_CONFIGS / "multi_node.yaml")).num_machines == 2
    zero3 = load_config_from_file(str(ACCELERATE_CONFIGS / "zero3.yaml")).deepspeed_config
    assert zero3["zero_stage"] == 3 and zero3["zero3_save_16bit_model"], "the final save gathers 16-bit weights"


def test_only_rank0_cleans_the_output_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hello_agents_rl.outputs import plan_output_dir

    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    monkeypatch.setenv("RANK", "1")
    plan = plan_output_dir(str(tmp_path), None, overwrite=True)
    assert plan.resume is None
    plan.apply()
    assert (tmp_path / "checkpoint-2").is_dir() and (tmp_path / "metrics.jsonl").is_file(), "rank 1 deletes nothing"
    monkeypatch.setenv("RANK", "0")
    plan_output_dir(str(tmp_path), None, overwrite=True).apply()
    assert not (tmp_path / "checkpoint-2").exists() and not (tmp_path / "metrics.jsonl").exists()


def test_cli_runs_as_a_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "train", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--batch_size" in proc.stdout


def test_example_run_configs_validate() -> None:
    from hello_agents_rl.workflows.actions import parse

    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(configs) >= 4
    for path in configs:
        params = yaml.safe_load(path.read_text())
        action = "search" if "space" in params else "train"  # what `hello-agents-rl <action> --config` adds
        train_keys = params["base"] if action == "search" else params
        # the SFT output or the GGUF file exist only after setup; vLLM needs a GPU (mapping: test_config.py)
        train_keys.update(model_name="Qwen/Qwen3-0.6B", use_vllm=False)
        assert parse({**params, "action": action}).action == action, path.name
