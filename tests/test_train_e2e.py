"""End to end on CPU with the tiny model: SFT, then GRPO from its output, every parameter the book names honoured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hello_agents.tools import RLTrainingTool
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from hello_agents_rl import ConfigError

pytestmark = pytest.mark.slow

GRPO_BASE = {
    "action": "train", "algorithm": "grpo", "dataset": "arithmetic", "max_samples": 16, "num_epochs": 1,
    "batch_size": 2, "num_generations": 4, "max_new_tokens": 16, "temperature": 1.0, "learning_rate": 5e-3,
    "logging_steps": 1, "save_steps": 2, "warmup_ratio": 0.0,
    # length shaping varies within a group even when every answer is wrong: a learning signal from step 1
    "reward_type": "length_penalty", "reward_config": {"target_length": 20, "penalty_weight": 1.0},
}


@pytest.fixture(scope="module")
def sft_run(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("sft") / "sft_full"
    return RLTrainingTool().run({
        "action": "train", "algorithm": "sft", "model_name": tiny_model, "output_dir": str(out),
        "dataset": "arithmetic", "max_samples": 64, "num_epochs": 1, "batch_size": 16, "learning_rate": 1e-3,
        "use_lora": True, "lora_rank": 8, "lora_alpha": 16, "logging_steps": 1, "save_steps": 100,
    })


@pytest.fixture(scope="module")
def grpo_run(sft_run: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    import contextlib
    import io

    out = tmp_path_factory.mktemp("grpo") / "grpo_model"
    console = io.StringIO()
    with contextlib.redirect_stdout(console):
        result = RLTrainingTool().run({**GRPO_BASE, "model_name": sft_run["output_dir"], "output_dir": str(out),
                                       "kl_coef": 0.05, "use_lora": True, "lora_rank": 8, "lora_alpha": 16,
                                       "log_completions_steps": 4})
    return result, out, console.getvalue()


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_sft_writes_a_model_grpo_can_start_from(sft_run: dict, tiny_model: str) -> None:
    out = Path(sft_run["output_dir"])
    assert sft_run["status"] == "completed" and sft_run["algorithm"] == "sft"
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(sft_run["model_path"])  # merged, plain transformers
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert AutoTokenizer.from_pretrained(sft_run["model_path"]).chat_template
    losses = [m["loss"] for m in _metrics(out) if "loss" in m and "train_runtime" not in m]
    assert sft_run["num_steps"] == 4 and sft_run["final_loss"] == losses[-1]
    # the LoRA update is folded into the base's own weights: same tensors, no adapter layers, changed values
    merged, original = model.state_dict(), base.state_dict()
    assert merged.keys() == original.keys() and not any("lora" in name for name in merged)
    assert any(not torch.equal(merged[name], original[name]) for name in original)


def test_the_model_card_names_the_local_model_the_run_started_from(sft_run: dict, tiny_model: str) -> None:
    card = (Path(sft_run["output_dir"]) / "README.md").read_text()
    assert "huggingface.co/None" not in card and 'model="None"' not in card
    assert f"the local model `{tiny_model}`" in card and sft_run["model_path"] in card


def test_result_values_are_what_the_run_logged(grpo_run: tuple) -> None:
    result, out, _ = grpo_run
    logs = [m for m in _metrics(out) if "train_runtime" not in m]
    rewards = [m["reward"] for m in logs if "reward" in m]
    losses = [m["loss"] for m in logs if "loss" in m]
    assert (result["status"], result["algorithm"], result["output_dir"]) == ("completed", "grpo", str(out))
    assert result["model_path"] == str(out / "model") and (out / "model" / "config.json").is_file()
    assert result["num_samples"] == 16 and result["num_steps"] == 8, "16 prompts / 2 per step"
    assert result["num_epochs"] == 1 and result["use_lora"] is True
    assert result["average_reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert result["final_loss"] == losses[-1]
    assert result["diagnostics"] == [d for m in logs for d in m.get("diagnostics", [])]
    assert result["train_runtime_s"] > 0 and result["train_cpu_s"] > 0
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(result))


def test_console_line_in_the_log(grpo_run: tuple) -> None:
    import re

    _, _, console = grpo_run
    assert re.search(r"Epoch 1/1 \| Step 4/8 \| Reward: -?\d+\.\d\d \| KL: \d+\.\d{3} \| Loss: -?\d+\.\d{3}", console)


def test_tensorboard_events_have_the_seed_tags(grpo_run: tuple) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, out, _ = grpo_run
    events = list(out.rglob("events.out.tfevents.*"))
    assert events, "TensorBoard events live under output_dir"
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert {"train/reward", "train/kl", "train/loss", "train/learning_rate", "train/epoch"} <= set(acc.Tags()["scalars"])


def test_lora_really_applied(grpo_run: tuple, sft_run: dict) -> None:
    result, out, _ = grpo_run
    assert 0 < result["trainable_parameters"] < result["total_parameters"] / 5
    adapter = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in adapter.items()), "the adapter learned something"
    base = load_file(str(Path(sft_run["model_path"]) / "model.safetensors"))
    merged = load_file(str(out / "model" / "model.safetensors"))
    changed = [k for k in base if not torch.equal(base[k], merged[k])]
    assert changed and all("proj" in k for k in changed), "only LoRA-wrapped linear weights change"


def test_kl_logged_and_positive_and_lengths_bounded(grpo_run: tuple) -> None:
    _, out, _ = grpo_run
    logs = [m for m in _metrics(out) if "kl" in m]
    assert logs and max(m["kl"] for m in logs) > 0, "kl_coef > 0 gives a real KL against the reference"
    assert max(m["completions/max_length"] for m in logs) <= GRPO_BASE["max_new_tokens"]
    assert [m["step"] for m in logs] == list(range(1, 9)), "one metrics.jsonl line per logged step"


def test_checkpoint_at_every_save_step(grpo_run: tuple) -> None:
    _, out, _ = grpo_run
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [f"checkpoint-{s}" for s in (2, 4, 6, 8)]


def test_warmup_ratio_changes_the_schedule(sft_run: dict, tmp_path: Path) -> None:
    lrs = {}
    for ratio in (0.0, 0.5):
        result = RLTrainingTool().run({**GRPO_BASE, "model_name": sft_run["model_path"], "output_dir": str(tmp_path / str(ratio)),
                                       "warmup_ratio": ratio, "max_samples": 8, "kl_coef": 0.0, "save_steps": 100})
        lrs[ratio] = [m["learning_rate"] for m in _metrics(Path(result["output_dir"])) if "learning_rate" in m]
    assert lrs[0.0][0] == pytest.approx(5e-3), "no warmup: the first step runs at the peak rate"
    assert lrs[0.5][0] < lrs[0.5][1] < 5e-3 * 1.0001 and lrs[0.5][0] < 5e-3 / 2


def test_finished_run_is_not_overwritten(grpo_run: tuple, sft_run: dict) -> None:
    _, out, _ = grpo_run
    before = (out / "results.json").read_text()
    with pytest.raises(ConfigError, match="overwrite_output_dir"):
        RLTrainingTool().run({**GRPO_BASE, "model_name": sft_run["output_dir"], "output_dir": str(out)})
    assert (out / "results.json").read_text() == before


def test_seed_first_example_verbatim(sft_run: dict, gsm8k_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELLO_AGENTS_GSM8K", gsm8k_dir)
    rl_tool = RLTrainingTool()
    result = rl_tool.run({
        "action": "train",
        "algorithm": "grpo",
        "model_name": sft_run["output_dir"],  # the book: "./models/sft_full"
        "output_dir": str(tmp_path / "grpo_model"),
        "max_samples": 4,  # the book: 100
        "num_epochs": 3,
        "batch_size": 4,
        "learning_rate": 1e-5,
        "num_generations": 4,
        "kl_coef": 0.05,
        "use_lora": True,
        "lora_rank": 16,
        "lora_alpha": 32,
        "reward_type": "accuracy",
    })
    assert result["num_samples"] == 4 and result["num_epochs"] == 3 and result["num_steps"] == 3
    logged = [m for m in _metrics(tmp_path / "grpo_model") if "reward" in m]
    rewards = [m["reward"] for m in logged]
    assert [m["step"] for m in logged] == [1, 3], "at the default logging_steps (10): the first step and the last"
    assert isinstance(result["average_reward"], float)
    assert result["average_reward"] == pytest.approx(sum(rewards) / len(rewards)), "the mean of the logged rewards"
    assert result["final_reward"] == rewards[-1]
    assert all(0.0 <= r <= 1.0 for r in rewards), "accuracy: the share of right answers"
    assert Path(result["model_path"], "config.json").is_file()


def test_completions_are_logged_for_a_person_to_read(grpo_run: tuple) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, out, console = grpo_run
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} == {4, 8}
    assert all("What is" in r["prompt"] and isinstance(r["advantage"], float) and r["rewards"] for r in rows)
    assert "[sample step 4]" in console
    acc = EventAccumulator(str(next(out.rglob("events.out.tfevents.*")).parent), size_guidance={"tensors": 0})
    acc.Reload()
    assert "train/completions/text_summary" in acc.Tags()["tensors"]


def test_wandb_offline_and_no_secret_leaks(sft_run: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-secret-0123456789abcdef0123456789abcdef"
    monkeypatch.setenv("WANDB_API_KEY", secret)
    monkeypatch.setenv("WANDB_PROJECT", "hello-agents-grpo")  # the book's way to turn wandb on
    monkeypatch.setenv("WANDB_LOG_MODEL", "false")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    out = tmp_path / "wandb_run"
    RLTrainingTool().run({**GRPO_BASE, "model_name": sft_run["model_path"], "output_dir": str(out),
                          "max_samples": 4, "kl_coef": 0.0, "save_steps": 100})
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert runs and any(runs[0].rglob("*.wandb")), "an offline wandb run was recorded"
    for file in out.rglob("*"):
        if file.is_file() and file.suffix in (".json", ".jsonl", ".md", ".txt", ""):
            assert secret not in file.read_text(errors="ignore"), file


def test_eval_steps_evaluate_on_the_eval_split(sft_run: dict, tmp_path: Path) -> None:
    out = tmp_path / "with_eval"
    RLTrainingTool().run({**GRPO_BASE, "model_name": sft_run["model_path"], "output_dir": str(out), "max_samples": 8,
                          "kl_coef": 0.0, "save_steps": 100, "eval_steps": 2, "eval_samples": 4, "eval_split": "test"})
    evals = [m for m in _metrics(out) if "eval_reward" in m]
    assert [m["step"] for m in evals] == [2, 4]
