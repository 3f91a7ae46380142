"""Bad input everywhere a user can give it: a clear message naming the problem, and no files left behind.

Together with the table in test_config.py and the file errors in test_data.py this covers > 40 cases.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hello_agents.tools import RLTrainingTool

from hello_agents_rl import ConfigError
from hello_agents_rl.interfaces.cli import main


def _train(tmp_path: Path, **params) -> None:
    RLTrainingTool().run({"action": "train", "output_dir": str(tmp_path / "out"), **params})


def _assert_no_output(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists(), "a rejected run must leave nothing in output_dir"


MORE_BAD = [
    ({"num_epochs": 0}, "num_epochs"),
    ({"save_steps": 0}, "save_steps"),
    ({"logging_steps": 0}, "logging_steps"),
    ({"lora_alpha": 0}, "lora_alpha"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"eval_steps": 0}, "eval_steps"),
    ({"kl_target": [0.1, 0.01]}, "kl_target"),
    ({"kl_target": [0.01, 0.1], "kl_coef": 0}, "kl_target"),
    ({"reward_type": "combined", "reward_config": {"components": [
        {"type": "accuracy", "weight": 0.5}, {"type": "length_penalty", "weight": 1.0}]}}, "length_penalty"),
    ({"reward_type": "length_penalty", "reward_config": {"target_lenght": 100}}, "target_length"),
    ({"reward_type": "step", "reward_config": {"step_bonus": -1}}, "step_bonus"),
    ({"reward_config": "accuracy"}, "reward_config"),
    ({"lora_target_modules": 3}, "lora_target_modules"),
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps"),
]


@pytest.mark.parametrize(("override", "key"), MORE_BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(MORE_BAD)])
def test_more_bad_training_parameters(override: dict, key: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=key):
        _train(tmp_path, **override)
    _assert_no_output(tmp_path)


def test_dataset_errors_surface_before_output_dir_is_touched(tiny_model: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"q": "What is 1 + 1?", "a": "2"}\n')
    with pytest.raises(ConfigError, match="no column 'question'"):
        _train(tmp_path, model_name=tiny_model, dataset=str(bad))
    with pytest.raises(ConfigError, match="unsupported int"):
        _train(tmp_path, model_name=tiny_model, dataset=42)
    _assert_no_output(tmp_path)


def test_model_folders_without_config_or_tokenizer(tiny_model: str, tmp_path: Path) -> None:
    import shutil

    no_tokenizer = tmp_path / "no_tok"
    shutil.copytree(tiny_model, no_tokenizer)
    for f in no_tokenizer.glob("tokenizer*"):
        f.unlink()
    (no_tokenizer / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ConfigError, match="model_name.*could not load Tokenizer"):
        _train(tmp_path, model_name=str(no_tokenizer), dataset="arithmetic")
    empty = tmp_path / "empty_model"
    empty.mkdir()
    with pytest.raises(ConfigError, match="model_name.*config.json"):
        _train(tmp_path, model_name=str(empty), dataset="arithmetic")
    _assert_no_output(tmp_path)


def test_unreachable_hub_id_fails_fast_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import time

    from hello_agents_rl.models import hub

    monkeypatch.delenv("HF_HUB_OFFLINE")  # as a user would run it: no hint that we are offline
    with socket.socket() as closed:  # a hub endpoint on this machine that nothing listens on: the probe is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    hub.hub_reachable.cache_clear()
    try:
        started = time.time()
        with pytest.raises(ConfigError, match="`model_name`: could not load .* the hub id 'Qwen/Qwen3-0.6B-typo'.*"
                                              "download the model once and point model_name at its local folder"):
            _train(tmp_path, model_name="Qwen/Qwen3-0.6B-typo", dataset="arithmetic")
        assert time.time() - started < 30
        assert hub.hub_reachable() is False  # judged by the probe, not by an offline setting
    finally:
        hub.hub_reachable.cache_clear()  # the next test probes its own endpoint
    _assert_no_output(tmp_path)


def test_missing_chat_template_falls_back_to_chatml(tiny_model: str, tmp_path: Path, caplog) -> None:
    import json
    import shutil

    from hello_agents_rl.models import load_tokenizer

    folder = tmp_path / "no_template"
    shutil.copytree(tiny_model, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = load_tokenizer(str(folder))
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "no chat template" in caplog.text


def test_resume_without_checkpoint_and_unfinished_runs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="resume_from_checkpoint.*no checkpoint"):
        _train(tmp_path, resume_from_checkpoint=True)
    (tmp_path / "out" / "checkpoint-3").mkdir(parents=True)
    with pytest.raises(ConfigError, match="unfinished run.*resume_from_checkpoint: true"):
        _train(tmp_path)


def test_other_actions_reject_bad_input(tmp_path: Path) -> None:
    tool = RLTrainingTool()
    with pytest.raises(ConfigError, match="model_path"):
        tool.run({"action": "evaluate"})
    with pytest.raises(ConfigError, match="ground_truth"):
        tool.run({"action": "create_reward", "completions": ["1", "2"], "ground_truth": [1, 2, 3]})
    with pytest.raises(ConfigError, match="models"):
        tool.run({"action": "compare", "models": ["a", "b"]})
    with pytest.raises(ConfigError, match="grpo.kl_coeff.*kl_coef"):
        tool.run({"action": "pipeline", "grpo": {"kl_coeff": 0.1}})
    with pytest.raises(ConfigError, match="parameters must be a dict"):
        tool.run(["train"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("num_epochs: 2\nbatch_size: [4\n", r"run\.yaml:\d+:\d+: invalid YAML"),
        ('{"num_epochs": 2,, "batch_size": 4}', r"run\.yaml:1:\d+: invalid YAML/JSON"),
        ("- num_epochs\n- 2\n", "top level must be a mapping"),
        ("kl_coeff: 0.1\n", "did you mean `kl_coef`"),
        ("batch_size: four\n", "batch_size"),
    ],
)
def test_cli_config_file_errors_exit_2_without_traceback(text: str, match: str, tmp_path: Path, capsys) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--config", str(config), "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    import re

    assert re.search(match, err), err
    _assert_no_output(tmp_path)


def test_cli_flag_errors(tmp_path: Path, capsys) -> None:
    for argv, match in ((["train", "--kl_coeff", "0.1"], "kl_coef"), (["train", "--batch_size", "2.5"], "batch_size"),
                        (["train", "--config", str(tmp_path / "missing.yaml")], "not found")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv + ["--output_dir", str(tmp_path / "out")])
        assert exit_info.value.code == 2 and match in capsys.readouterr().err
    config = tmp_path / "latin1.yaml"
    config.write_bytes("model_name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(SystemExit):
        main(["train", "--config", str(config)])
    assert "UTF-8" in capsys.readouterr().err
    _assert_no_output(tmp_path)


def test_cli_process_exit_status() -> None:
    proc = subprocess.run([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "train", "--lora_rank", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "lora_rank" in proc.stderr and "Traceback" not in proc.stderr
