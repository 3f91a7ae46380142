"""What a user owns is never deleted, and nothing broken is called "completed" (issue: ~100 plausible mistakes).

Each test is a reproduction from that review: it failed on 0.3.0. Every refusal is checked to leave the
user's files as they were and no empty output_dir behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hello_agents.tools import RLTrainingTool

from hello_agents_rl import ConfigError
from hello_agents_rl.interfaces.cli import main

SFT = {
    "action": "train", "algorithm": "sft", "dataset": "arithmetic", "max_samples": 16, "max_steps": 2,
    "batch_size": 4, "logging_steps": 1, "save_steps": 1, "report_to": "none", "lora_rank": 4, "lora_alpha": 8,
}


def _run(**params) -> dict:
    return RLTrainingTool().run(params)


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below folder with its bytes: equal snapshots mean nothing was touched."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _cli(*argv: str, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    return exit_info.value.code, capsys.readouterr().err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A tiny SFT LoRA run that completed: (model_name, output_dir)."""
    from hello_agents_rl.models import build_tiny_model

    root = tmp_path_factory.mktemp("finished")
    model = str(build_tiny_model(root / "tiny"))
    result = _run(**SFT, model_name=model, output_dir=str(root / "run"))
    assert result["status"] == "completed"
    return model, root / "run"


@pytest.fixture
def run_copy(finished_run: tuple[str, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished_run[1], copy)
    return copy


# --- 1. export -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_export_never_deletes_a_folder_it_did_not_write(run_copy: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ideas.txt").write_text("mine")
    before = _snapshot(notes)
    with pytest.raises(ConfigError, match="output_dir.*not empty"):
        _run(action="export", model_path=str(run_copy), output_dir=str(notes))
    with pytest.raises(ConfigError, match="no export wrote"):  # even with overwrite
        _run(action="export", model_path=str(run_copy), output_dir=str(notes), overwrite_output_dir=True)
    assert _snapshot(notes) == before


@pytest.mark.slow
@pytest.mark.parametrize("target", [".", "adapter", "model", "checkpoint-1"])
def test_export_into_the_run_or_its_adapter_is_refused(run_copy: Path, target: str) -> None:
    before = _snapshot(run_copy)
    destination = run_copy if target == "." else run_copy / target
    for model_path in (run_copy, run_copy / "adapter"):
        with pytest.raises(ConfigError, match="overlaps the model being exported"):
            _run(action="export", model_path=str(model_path), output_dir=str(destination), overwrite_output_dir=True)
    assert _snapshot(run_copy) == before


@pytest.mark.slow
def test_export_dot_is_a_clear_error(run_copy: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "keep.txt").write_text("x")
    monkeypatch.chdir(work)
    code, err = _cli("export", "--model_path", str(run_copy), "--output_dir", ".", capsys=capsys)
    assert code == 2 and "output_dir" in err and "Traceback" not in err
    assert (work / "keep.txt").read_text() == "x"


@pytest.mark.slow
def test_export_overwrite_replaces_only_the_earlier_export(run_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "exported"
    first = _run(action="export", model_path=str(run_copy), output_dir=str(out))
    assert first["status"] == "completed" and (out / "config.json").is_file() and (out / "README.md").is_file()
    (out / "my_notes.md").write_text("keep me")
    (out / "config.json").write_text("{}")  # an earlier export's file: the new export replaces it
    _run(action="export", model_path=str(run_copy), output_dir=str(out), overwrite_output_dir=True)
    assert (out / "my_notes.md").read_text() == "keep me"
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3"
    assert not [p for p in out.iterdir() if ".export-" in p.name], "no staging folder left behind"


# --- 2. overwrite only after the new run has loaded ----------------------------------------------------------


@pytest.mark.slow
def test_overwrite_with_bad_data_keeps_the_old_run(run_copy: Path, finished_run: tuple[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "What is 1 + 1?"}\n')
    before = _snapshot(run_copy)
    with pytest.raises(ConfigError, match="no column 'answer'"):
        _run(**{**SFT, "dataset": str(bad)}, model_name=finished_run[0], output_dir=str(run_copy),
             overwrite_output_dir=True)
    assert _snapshot(run_copy) == before


# --- 3. resume on a finished run ------------------------------------------------------------------------------


@pytest.mark.slow
def test_resume_of_a_finished_run_says_it_is_finished(run_copy: Path, finished_run: tuple[str, Path]) -> None:
    before = _snapshot(run_copy)
    with pytest.raises(ConfigError, match="resume_from_checkpoint.*finished.*step 2"):
        _run(**SFT, model_name=finished_run[0], output_dir=str(run_copy), resume_from_checkpoint=True)
    assert _snapshot(run_copy) == before


# --- 4. output_dir and model_name ----------------------------------------------------------------------------


def test_output_dir_overlapping_model_name_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(ConfigError, match="output_dir.*inside model_name"):
        _run(**SFT, model_name=str(model), output_dir=str(model))
    with pytest.raises(ConfigError, match="output_dir.*inside model_name"):
        _run(**SFT, model_name=str(model), output_dir=str(model / "sft"))
    with pytest.raises(ConfigError, match="model_name.*inside output_dir"):
        _run(**SFT, model_name=str(model), output_dir=str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and not any(model.iterdir())


@pytest.mark.slow
def test_a_users_readme_survives_a_run_and_a_run_dir_is_the_next_model(finished_run: tuple[str, Path],
                                                                      tmp_path: Path) -> None:
    out = tmp_path / "grpo"
    out.mkdir()
    (out / "README.md").write_text("# my experiment notes\n")
    result = _run(action="train", algorithm="grpo", model_name=str(finished_run[1]), output_dir=str(out),
                  dataset="arithmetic", max_samples=8, max_steps=2, batch_size=2, num_generations=2,
                  max_new_tokens=8, save_steps=1, logging_steps=1, report_to="none")
    assert result["status"] == "completed" and (out / "checkpoint-2").is_dir()
    assert (out / "README.md").read_text() == "# my experiment notes\n"


@pytest.mark.slow
def test_a_foreign_model_folder_in_output_dir_is_not_replaced(finished_run: tuple[str, Path], tmp_path: Path) -> None:
    (tmp_path / "out" / "model").mkdir(parents=True)
    (tmp_path / "out" / "model" / "weights.bin").write_text("mine")
    with pytest.raises(ConfigError, match="model/ folder that no run of this tool wrote"):
        _run(**SFT, model_name=finished_run[0], output_dir=str(tmp_path / "out"))
    assert (tmp_path / "out" / "model" / "weights.bin").read_text() == "mine"


# --- 5. where details go ----------------------------------------------------------------------------------------


def test_details_path_is_checked_before_the_evaluation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="details_path.*is a folder"):
        _run(action="evaluate", model_path=str(tmp_path), details_path=str(tmp_path))
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="details_path.*is a file"):
        _run(action="evaluate", model_path=str(tmp_path), details_path=str(blocker / "details.jsonl"))
    with pytest.raises(ConfigError, match="report_path.*is a folder"):
        _run(action="compare", models={"a": str(tmp_path)}, report_path=str(tmp_path))


# --- 6. non-finite numbers and non-finite weights ----------------------------------------------------------------


@pytest.mark.parametrize("key", ["learning_rate", "kl_coef", "num_epochs", "reward_failure_value"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), "inf", "nan", "-Infinity"])
def test_non_finite_numbers_are_refused(key: str, value: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=key):
        _run(action="train", output_dir=str(tmp_path / "out"), **{key: value})
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_nan_weights_are_never_completed_nor_saved(finished_run: tuple[str, Path], tmp_path: Path) -> None:
    import torch
    from transformers import TrainerCallback

    from hello_agents_rl.trainers.run import train
    from hello_agents_rl.workflows.actions import parse

    class PoisonWeights(TrainerCallback):  # what an overflowing update does, with finite gradients
        def on_step_end(self, args, state, control, model=None, **kwargs):
            with torch.no_grad():
                next(p for p in model.parameters() if p.requires_grad).fill_(float("nan"))

    out = tmp_path / "out"
    result = train(parse({**SFT, "model_name": finished_run[0], "output_dir": str(out)}), [PoisonWeights()])
    assert result["status"] == "failed" and "NaN" in result["error"]
    assert not (out / "model").exists() and not (out / "adapter").exists()
    saved = json.loads((out / "results.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert saved["status"] == "failed"


# --- 7. runs that would not train --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_of_zero_steps_is_refused_with_the_arithmetic(tiny_model: str, tmp_path: Path) -> None:
    one = tmp_path / "one.jsonl"
    one.write_text('{"question": "What is 1 + 1?", "answer": "2"}\n')
    with pytest.raises(ConfigError, match=r"batch_size.*= 4 prompts.*has 1.*0 steps"):
        _run(action="train", algorithm="grpo", model_name=tiny_model, dataset=str(one), output_dir=str(tmp_path / "out"))
    with pytest.raises(ConfigError, match=r"max_length.*every example would be dropped"):
        _run(**SFT, model_name=tiny_model, max_length=8, output_dir=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


# --- 8. splits ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("params", "listed"), [
    ({"dataset": "arithmetic", "split": "Test"}, "train, test"),
    ({"dataset": "gsm8k", "split": "validation"}, "train, test"),
])
def test_unknown_splits_are_errors_listing_the_splits(params: dict, listed: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"split.*not a split.*{listed}"):
        _run(action="evaluate", model_path=str(tmp_path), **params)
    with pytest.raises(ConfigError, match="eval_split"):
        _run(action="train", output_dir=str(tmp_path / "o"), dataset="arithmetic", eval_steps=5, eval_split="valid")


def test_a_dataset_dict_split_is_chosen_by_name() -> None:
    from datasets import Dataset, DatasetDict

    from hello_agents_rl.data.sources import load

    data = DatasetDict({"train": Dataset.from_dict({"question": ["1 + 1?"], "answer": ["2"]}),
                        "dev": Dataset.from_dict({"question": ["2 + 2?", "3 + 3?"], "answer": ["4", "6"]})})
    from hello_agents_rl.workflows.actions import parse

    assert len(load(parse({"action": "load_dataset", "dataset": data, "split": "dev"}))) == 2
    with pytest.raises(ConfigError, match="it has: train, dev"):
        parse({"action": "load_dataset", "dataset": data, "split": "test"})


def test_max_samples_on_the_embedded_task_draws_without_replacement() -> None:
    from hello_agents_rl.data.sources import load
    from hello_agents_rl.workflows.actions import parse

    rows = load(parse({"action": "load_dataset", "dataset": "arithmetic", "max_samples": 300, "seed": 3}))
    assert len(rows) == 300 and len(set(rows["question"])) == 300
    again = load(parse({"action": "load_dataset", "dataset": "arithmetic", "max_samples": 300, "seed": 3}))
    assert rows["question"] == again["question"]


# --- 9. data read as written -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "text", "error"), [
    ("extra.csv", "question,answer\nWhat is 3 + 4?,7,8\n", r"extra.csv:2: 3 fields where the header has 2"),
    ("comma.csv", "question,answer\nAdd 3, 4,7\n", r"comma.csv:2: 3 fields.*double quotes"),
    ("short.csv", "question,answer\nWhat is 3 + 4?\n", r"short.csv:2: 1 fields"),
    ("null.jsonl", '{"question": "What is 1 + 1?", "answer": "2"}\n{"question": null, "answer": "3"}\n',
     r"null.jsonl:2: 'question' is empty"),
])
def test_malformed_rows_are_errors_with_file_and_line(name: str, text: str, error: str, tmp_path: Path) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=error):
        _run(action="load_dataset", dataset=str(tmp_path / name))


def test_bom_and_pretty_printed_json_arrays_are_read(tmp_path: Path) -> None:
    (tmp_path / "bom.csv").write_bytes("question,answer\nWhat is 3 + 4?,7\n".encode("utf-8-sig"))
    assert _run(action="load_dataset", dataset=str(tmp_path / "bom.csv"))["sample"]["ground_truth"] == "7"
    (tmp_path / "bom.jsonl").write_bytes('{"question": "1 + 1?", "answer": "2"}\n'.encode("utf-8-sig"))
    assert _run(action="load_dataset", dataset=str(tmp_path / "bom.jsonl"))["num_samples"] == 1
    rows = [{"question": "What is 2 + 2?", "answer": "4"}, {"question": "What is 5 + 5?", "answer": "10"}]
    (tmp_path / "pretty.json").write_text(json.dumps(rows, indent=2))
    described = _run(action="load_dataset", dataset=str(tmp_path / "pretty.json"))
    assert described["num_samples"] == 2 and described["sample"]["ground_truth"] == "4"


# --- 10. YAML -------------------------------------------------------------------------------------------------


def test_a_key_given_twice_in_yaml_is_an_error(tmp_path: Path, capsys) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("learning_rate: 1e-5\nbatch_size: 2\nlearning_rate: 1e-3\n")
    code, err = _cli("train", "--config", str(config), capsys=capsys)
    assert code == 2 and "run.yaml:3" in err and "'learning_rate' appears twice" in err


# --- 11. CLI values as typed --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "expected"), [
    (["--system_prompt", ""], {"system_prompt": ""}),
    (["--system_prompt", "# Be concise"], {"system_prompt": "# Be concise"}),
    (["--system-prompt", "# Be concise"], {"system_prompt": "# Be concise"}),
    (["--batch-size", "2", "--report-to", "[none]"], {"batch_size": 2, "report_to": ["none"]}),
    (["--batch_size", "2", "--report_to", "[none]"], {"batch_size": 2, "report_to": ["none"]}),
])
def test_cli_values_are_taken_as_typed(argv: list[str], expected: dict) -> None:
    from hello_agents_rl.interfaces.cli import build_parser, params_from_args

    args, extra = build_parser().parse_known_args(["train", *argv])
    assert params_from_args(args, "train", extra) == {**expected, "action": "train"}


def test_no_prefix_abbreviation(capsys) -> None:
    code, err = _cli("train", "--lr", "1e-5", capsys=capsys)
    assert code == 2 and "`lr`: unknown parameter" in err


# --- 12. clear errors instead of tracebacks -------------------------------------------------------------------


@pytest.mark.parametrize(("params", "error"), [
    ({"lr_scheduler_type": "cosin"}, "lr_scheduler_type.*did you mean `cosine`"),
    ({"seed": -1}, "seed"),
    ({"output_dir": ""}, "output_dir.*empty"),
])
def test_more_bad_values(params: dict, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        _run(action="train", **{"output_dir": "/tmp/never-used", **params})


@pytest.mark.slow
def test_lora_target_modules_matching_nothing_lists_the_layers(tiny_model: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"lora_target_modules.*'qkv'.*down_proj.*q_proj"):
        _run(**SFT, model_name=tiny_model, lora_target_modules=["qkv"], output_dir=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_truncated_weights_file_is_named(tiny_model: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ConfigError, match=r"model_name.*model.safetensors is damaged.*cut short"):
        _run(**SFT, model_name=str(broken), output_dir=str(tmp_path / "out"))
    with pytest.raises(ConfigError, match=r"model_path.*model.safetensors is damaged"):
        _run(action="evaluate", model_path=str(broken), dataset="arithmetic", max_samples=2)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_resume_refuses_a_truncated_optimizer_file_and_trims_nothing(finished_run: tuple[str, Path],
                                                                     tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run[1], run)
    (run / "results.json").unlink()  # an unfinished run: checkpoints 1 and 2
    optimizer = run / "checkpoint-2" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    before = _snapshot(run)
    with pytest.raises(ConfigError, match=r"checkpoint-2/optimizer.pt is damaged"):
        _run(**SFT, model_name=finished_run[0], output_dir=str(run), resume_from_checkpoint=True)
    assert _snapshot(run) == before


def test_create_reward_rejects_completions_that_do_not_fill_groups(capsys) -> None:
    code, err = _cli("create-reward", "--completions", '["a", "b", "c"]', "--num_generations", "2", capsys=capsys)
    assert code == 2 and "num_generations" in err and "3 completions" in err


def test_create_reward_treats_a_bad_custom_reward_as_training_does() -> None:
    def says_yes(completion: str, ground_truth: object, **_: object) -> object:
        return "yes" if "4" in completion else [1.0]

    result = _run(action="create_reward", reward_type=says_yes, completions=["4", "5"], ground_truth="4",
                  reward_failure_value=-1.0)
    assert result["scores"] == [-1.0, -1.0] and result["reward_failures"] == 2
    assert "must return a finite number" in result["first_failure"]


# --- 13. wandb without a network -----------------------------------------------------------------------------


def test_wandb_without_network_fails_fast_with_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    started = time.time()
    with pytest.raises(ConfigError, match="report_to.*WANDB_MODE=offline"):
        _run(action="train", report_to="wandb", output_dir=str(tmp_path / "out"))
    assert time.time() - started < 10 and not (tmp_path / "out").exists()


# --- 14. messages that name the right thing -------------------------------------------------------------------


def test_a_missing_local_model_path_is_not_called_a_hub_id(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"`model_path`: local path './no/such/run' does not exist") as error:
        _run(action="evaluate", model_path="./no/such/run")
    assert "could not load" not in str(error.value) and "hub id './no" not in str(error.value)
    with pytest.raises(ConfigError, match=r"models`: model 'grpo': local path .* does not exist"):
        _run(action="compare", models={"base": str(tmp_path), "grpo": "./no/such/run"})


@pytest.mark.slow
def test_an_adapter_without_its_base_says_so(run_copy: Path, tmp_path: Path) -> None:
    adapter = run_copy / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "moved_base")
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"model_path.*needs its base model, which is missing.*moved_base"):
        _run(action="evaluate", model_path=str(adapter), dataset="arithmetic", max_samples=2)


@pytest.mark.slow
def test_a_pipeline_into_a_finished_folder_is_refused_before_any_evaluation(tiny_model: str, tmp_path: Path,
                                                                           monkeypatch) -> None:
    import hello_agents_rl.workflows.pipeline as pipeline

    (tmp_path / "p" / "sft").mkdir(parents=True)
    (tmp_path / "p" / "sft" / "results.json").write_text('{"status": "completed"}')
    monkeypatch.setattr(pipeline, "evaluate", lambda cfg: pytest.fail("evaluated before refusing"))
    with pytest.raises(ConfigError, match="output_dir.*finished run"):
        _run(action="pipeline", model_name=tiny_model, dataset="arithmetic", output_dir=str(tmp_path / "p"))


def test_custom_code_models_keep_the_trust_remote_code_hint(tmp_path: Path) -> None:
    from hello_agents_rl.models import load_model

    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "config.json").write_text(json.dumps({
        "model_type": "my_custom_lm", "auto_map": {"AutoConfig": "configuration_my.MyConfig",
                                                   "AutoModelForCausalLM": "modeling_my.MyModel"}}))
    with pytest.raises(ConfigError, match="trust_remote_code"):
        load_model(str(custom))


# --- the CLI end to end: a refusal exits 2 and leaves nothing --------------------------------------------------


def test_cli_refusals_leave_no_output_dir(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"dataset": "arithmetic", "split": "validation", "output_dir": str(tmp_path / "o")}))
    proc = subprocess.run([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "train", "--config", str(config)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and "not a split" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()
