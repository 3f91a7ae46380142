"""Validation: every bad input names its key before anything loads; the seed's examples pass unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hello_agents.tools import RLTrainingTool
from hypothesis import given, settings
from hypothesis import strategies as st

from hello_agents_rl import ConfigError
from hello_agents_rl.config import TrainConfig
from hello_agents_rl.trainers.args import trl_args
from hello_agents_rl.workflows.actions import parse

SEED_FIRST = {
    "action": "train", "algorithm": "grpo", "model_name": "Qwen/Qwen3-0.6B", "output_dir": "./models/grpo_model",
    "max_samples": 100, "num_epochs": 3, "batch_size": 4, "learning_rate": 1e-5, "num_generations": 4,
    "kl_coef": 0.05, "use_lora": True, "lora_rank": 16, "lora_alpha": 32, "reward_type": "accuracy",
}
SEED_FULL = {
    "action": "train", "algorithm": "grpo", "model_name": "Qwen/Qwen3-0.6B", "output_dir": "./models/grpo_full",
    "max_samples": None, "num_epochs": 3, "batch_size": 4, "learning_rate": 1e-5, "warmup_ratio": 0.1,
    "num_generations": 4, "max_new_tokens": 512, "temperature": 0.8, "kl_coef": 0.05, "clip_range": 0.2,
    "use_lora": True, "lora_rank": 16, "lora_alpha": 32, "reward_type": "combined",
    "reward_config": {"components": [
        {"type": "accuracy", "weight": 1.0},
        {"type": "length_penalty", "weight": 0.5, "target_length": 200},
        {"type": "step", "weight": 0.3, "step_bonus": 0.1},
    ]},
    "save_steps": 500, "logging_steps": 100,
}
SEED_MONITORED = {
    "action": "train", "algorithm": "grpo", "model_name": "Qwen/Qwen3-0.6B", "output_dir": "./models/grpo_tb",
    "num_epochs": 2, "batch_size": 2, "use_lora": True,
}


@pytest.mark.parametrize("example", [SEED_FIRST, SEED_FULL, SEED_MONITORED])
def test_seed_examples_validate_unchanged(example: dict) -> None:
    cfg = parse(dict(example))
    for key, value in example.items():
        if key not in ("reward_config",):
            assert getattr(cfg, key) == value


BAD = [
    ({"kl_coeff": 0.1}, "kl_coeff", "did you mean `kl_coef`"),
    ({"lerning_rate": 1e-5}, "lerning_rate", "learning_rate"),
    ({"batch_size": "four"}, "batch_size", "integer"),
    ({"batch_size": 2.5}, "batch_size", ""),
    ({"use_lora": "maybe"}, "use_lora", ""),
    ({"num_generations": 1}, "num_generations", "greater than or equal to 2"),
    ({"temperature": 0}, "temperature", "greater than 0"),
    ({"temperature": -0.5}, "temperature", ""),
    ({"learning_rate": 0}, "learning_rate", ""),
    ({"learning_rate": -1e-5}, "learning_rate", ""),
    ({"learning_rate": float("nan")}, "learning_rate", "finite"),
    ({"kl_coef": -0.1}, "kl_coef", ""),
    ({"clip_range": 0}, "clip_range", ""),
    ({"clip_range": 1.5}, "clip_range", ""),
    ({"lora_rank": 0}, "lora_rank", ""),
    ({"warmup_ratio": 1.0}, "warmup_ratio", ""),
    ({"warmup_ratio": -0.1}, "warmup_ratio", ""),
    ({"max_samples": 0}, "max_samples", ""),
    ({"max_new_tokens": 0}, "max_new_tokens", ""),
    ({"reward_type": "combined"}, "components", ""),
    ({"reward_type": "combined", "reward_config": {"components": []}}, "components", ""),
    ({"reward_type": "combined", "reward_config": {"components": [{"type": "acuracy", "weight": 1}]}}, "type", "accuracy"),
    ({"reward_type": "combined", "reward_config": {"components": [{"type": "accuracy"}]}}, "weight", ""),
    ({"reward_type": "accurate"}, "reward_type", "accuracy"),
    ({"action": "trian"}, "action", "train"),
    ({"algorithm": "ppo"}, "algorithm", ""),
    ({"model_name": "./models/does_not_exist"}, "model_name", "does not exist"),
    ({"output_dir": "/proc/hello-agents-rl-test"}, "output_dir", "writable"),
    ({"report_to": ["tensorbord"]}, "report_to", "tensorboard"),
    ({"scale_rewards": "sometimes"}, "scale_rewards", ""),
]


@pytest.mark.parametrize(("override", "key", "hint"), BAD, ids=[b[1] + str(i) for i, b in enumerate(BAD)])
def test_bad_input_names_the_key(override: dict, key: str, hint: str, tmp_path) -> None:
    params = {"action": "train", "output_dir": str(tmp_path / "out"), **override}
    with pytest.raises(ConfigError, match=key) as caught:
        RLTrainingTool().run(params)
    assert hint in str(caught.value)
    assert not (tmp_path / "out").exists(), "a rejected config must not create output files"


def test_mapping_to_trl_fields() -> None:
    cfg = parse({**SEED_FULL, "output_dir": "/tmp/x"})
    args = trl_args(cfg)
    assert args["max_completion_length"] == 512
    assert args["beta"] == 0.05 and args["epsilon"] == 0.2 and args["temperature"] == 0.8
    assert args["num_generations"] == 4
    assert args["per_device_train_batch_size"] == 16, "4 prompts x 4 generations = 16 completions"
    assert args["warmup_steps"] == 0.1, "transformers 5: warmup_steps < 1 is a ratio"
    assert args["learning_rate"] == 1e-5 and args["num_train_epochs"] == 3
    assert args["save_steps"] == 500 and args["logging_steps"] == 100
    assert args["scale_rewards"] == "none", "advantage = r - group mean, as the seed defines it"
    assert args["chat_template_kwargs"] == {"enable_thinking": False}
    sft_keys = {k: v for k, v in SEED_FIRST.items() if k not in ("num_generations", "kl_coef", "reward_type")}
    sft = trl_args(parse({**sft_keys, "algorithm": "sft", "output_dir": "/tmp/x"}))
    assert sft["per_device_train_batch_size"] == 4 and "beta" not in sft


def test_each_key_reaches_the_field_trl_peft_and_transformers_call_it() -> None:
    """config/their_names.py is the one table: trl_args sets each field from its key, and docs/usage.md lists it."""
    import dataclasses

    from peft import LoraConfig
    from trl import GRPOConfig

    from hello_agents_rl.config.their_names import THEIR_NAME_FOR
    from hello_agents_rl.trainers.args import lora_for

    cfg = parse({**SEED_FULL, "output_dir": "/tmp/x", "clip_range_high": 0.28, "lora_target_modules": ["q_proj"],
                 "tools": ["calculator"], "max_tool_turns": 3})
    args, lora = trl_args(cfg), lora_for(cfg)
    fields = {f.name for f in dataclasses.fields(GRPOConfig)} | {f.name for f in dataclasses.fields(LoraConfig)}
    mapping = (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text(encoding="utf-8")
    for ours, theirs in THEIR_NAME_FOR.items():
        assert theirs in fields, theirs
        value = args[theirs] if theirs in args else getattr(lora, theirs)
        value = sorted(value) if isinstance(value, set) else value  # PEFT keeps target_modules as a set
        expected = getattr(cfg, ours) * (cfg.num_generations if ours == "batch_size" else 1)  # TRL counts completions
        assert value == expected, (ours, theirs)
        assert f"| `{ours}` | `{theirs}` |" in mapping, f"docs/usage.md's mapping table lacks {ours} -> {theirs}"


@pytest.mark.parametrize(("params", "said"), [
    ({"beta": 0.1, "epsilon_high": 0.28}, ["`beta`: unknown parameter for action 'train'; did you mean `kl_coef`?",
                                          "`epsilon_high`: unknown parameter for action 'train'; did you mean "
                                          "`clip_range_high`?"]),
    ({"per_device_train_batch_size": 2, "max_completion_length": 64, "bogus": 1},
     ["did you mean `batch_size`?", "did you mean `max_new_tokens`?", "`bogus`: unknown parameter"]),
    ({"step_bonus": 0.2, "call_bonus": 0.1, "target_length": 80},  # a reward's own parameter at the top level
     ['`step_bonus`: unknown parameter for action \'train\'; it is the `step` reward\'s parameter: write '
      '{"reward_config": {"step_bonus": 0.2}} (read with reward_type step, or in a combined reward\'s step component)',
      'write {"tool_reward": {"call_bonus": 0.1}}',
      '`target_length`: unknown parameter for action \'train\'; it is the `length_penalty` reward\'s parameter']),
])
def test_trls_names_get_ours_and_every_unknown_key_is_named_at_once(params: dict, said: list[str]) -> None:
    with pytest.raises(ConfigError) as refused:
        parse({"action": "train", **params})
    for text in said:
        assert text in str(refused.value)


class _Reads:
    """A config that records every key read of it."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg, self.read = cfg, set()

    def __getattr__(self, key: str):
        self.read.add(key)
        return getattr(self.cfg, key)


@pytest.mark.parametrize("algorithm", ["sft", "grpo"])
def test_which_algorithm_reads_a_key_matches_what_its_trainer_reads(algorithm: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """ONLY_FOR comes from the class a key is defined in; TRL's arguments for one algorithm never read a key of the
    other's, and read every key of their own that TRL takes."""
    from hello_agents_rl.config.train import ONLY_FOR
    from hello_agents_rl.trainers import args
    from hello_agents_rl.trainers.args import trl_args

    reads = _Reads(parse({"action": "train", "algorithm": algorithm}))
    monkeypatch.setattr(args, "uses_tools", lambda cfg: False)  # asked of every run alike, whatever its algorithm
    trl_args(reads)  # type: ignore[arg-type]
    other = {key for key, owner in ONLY_FOR.items() if owner != algorithm}
    assert not reads.read & other
    own = {key for key, owner in ONLY_FOR.items() if owner == algorithm}
    assert own & reads.read, "the trainer's own keys are read"


@pytest.mark.parametrize(("algorithm", "keys"), [
    ("sft", {"loss_type": "grpo", "clip_range_high": 0.3, "top_entropy_quantile": 0.2, "kl_coef": 0.1,
             "mask_truncated_completions": True, "importance_sampling_level": "sequence", "scale_rewards": "group",
             "num_generations": 8, "temperature": 0.9, "reward_type": "step"}),
    ("sft", {"max_new_tokens": 64, "answer_checker": "math_verify", "tool_timeout": 5.0, "max_tool_turns": 2}),
    ("grpo", {"max_length": 512}),
])
def test_a_key_only_the_other_algorithm_reads_is_refused(algorithm: str, keys: dict, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="read only by") as refused:
        RLTrainingTool().run({"action": "train", "algorithm": algorithm, "output_dir": str(tmp_path / "out"), **keys})
    assert all(f"`{key}`" in str(refused.value) for key in keys), "every misplaced key named at once"
    assert not (tmp_path / "out").exists()
    pipeline = parse({"action": "pipeline", "kl_coef": 0.1, "max_length": 256})  # shared keys go where they are read
    assert pipeline.stage("grpo").kl_coef == 0.1 and pipeline.stage("sft").max_length == 256
    written_back = parse({"action": "train", "algorithm": algorithm, **{k: TrainConfig.model_fields[k].default
                                                                       for k in keys}})
    assert written_back.algorithm == algorithm, "a key given with its default value changes nothing: accepted"


def test_defaults_by_algorithm() -> None:
    assert parse({"algorithm": "grpo", "use_lora": False}).learning_rate == 1e-5  # the book's range
    assert parse({"algorithm": "grpo"}).learning_rate == 1e-4  # LoRA (the default): benchmarks/lora_lr_search.py
    assert parse({"algorithm": "grpo", "learning_rate": 3e-6}).learning_rate == 3e-6  # a given rate is kept
    assert parse({"algorithm": "sft", "use_lora": False}).learning_rate == 2e-5
    assert parse({"algorithm": "sft"}).output_dir == "./models/sft_model"


def test_wandb_turns_on_with_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_PROJECT", "hello-agents-grpo")
    assert "wandb" in trl_args(parse({"output_dir": "/tmp/x"}))["report_to"]
    assert trl_args(parse({"output_dir": "/tmp/x", "report_to": "none"}))["report_to"] == "none"


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(TrainConfig.model_fields) + ["bogus", "kl_coeff"]),
                       st.one_of(st.none(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=8),
                                 st.booleans(), st.lists(st.integers(), max_size=2)), max_size=6))
def test_parsing_never_crashes_with_anything_but_config_error(params: dict) -> None:
    params.pop("model_name", None), params.pop("output_dir", None), params.pop("action", None)
    try:
        parse({"output_dir": "/tmp/hypothesis-out", **params})
    except ConfigError:
        pass


def test_vllm_options_map_and_fail_clearly_without_vllm() -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ConfigError, match="use_vllm"):
            parse({"use_vllm": True, "output_dir": "/tmp/x"})
    cfg = parse({"vllm_mode": "server", "vllm_server_port": 8123, "output_dir": "/tmp/x"})
    args = trl_args(cfg)
    assert args["vllm_mode"] == "server" and args["vllm_server_port"] == 8123 and args["use_vllm"] is False
    with pytest.raises(ConfigError, match="vllm_mode"):
        parse({"vllm_mode": "remote"})
    with pytest.raises(ConfigError, match="vllm_gpu_memory_utilization"):
        parse({"vllm_gpu_memory_utilization": 1.5})


def test_vllm_without_a_gpu_is_refused_before_any_model_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU check needs torch, so it runs at the start of train and pipeline, not at validation."""
    import torch

    from hello_agents_rl.config import checks
    from hello_agents_rl.trainers import run as trainer_run
    from hello_agents_rl.workflows import pipeline

    monkeypatch.setattr(checks, "find_spec", lambda name: object())  # vLLM installed, as far as validation sees
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def no_model(*args: object, **kwargs: object) -> None:
        pytest.fail("a model was loaded before the GPU check")

    monkeypatch.setattr(trainer_run, "load_model", no_model)
    monkeypatch.setattr(pipeline, "evaluate", no_model)
    train_cfg = parse({"model_name": "org/m", "dataset": "arithmetic", "use_vllm": True, "output_dir": str(tmp_path / "t")})
    with pytest.raises(ConfigError, match="`use_vllm`: vLLM needs a CUDA GPU"):
        trainer_run.train(train_cfg)
    pipeline_cfg = parse({"action": "pipeline", "model_name": "org/m", "dataset": "arithmetic",
                          "grpo": {"use_vllm": True}, "output_dir": str(tmp_path / "p")})
    with pytest.raises(ConfigError, match="`use_vllm`: vLLM needs a CUDA GPU"):
        pipeline.run_pipeline(pipeline_cfg)
    assert not (tmp_path / "t").exists() and not (tmp_path / "p").exists()


def test_scheduler_names_match_transformers() -> None:
    """Validation keeps its own copy of the names (it imports no transformers): a drift fails here."""
    from transformers.trainer_utils import SchedulerType

    from hello_agents_rl.config import SCHEDULERS

    assert sorted(SCHEDULERS) == sorted(kind.value for kind in SchedulerType)
    with pytest.raises(ConfigError, match="`lr_scheduler_type`: unknown scheduler; did you mean `cosine`"):
        parse({"lr_scheduler_type": "cosin", "output_dir": "/tmp/x"})


def test_one_action_table_serves_tool_cli_and_parser() -> None:
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.interfaces.cli import COMMANDS, build_parser, params_from_args
    from hello_agents_rl.workflows.actions import ACTIONS

    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0].choices  # argparse keeps them here
    assert {COMMANDS[c] for c in subcommands if c in COMMANDS} == set(ACTIONS)
    tool_keys = {p["name"] for p in RLTrainingTool().get_parameters()}
    action_key = RLTrainingTool().get_parameters()[0]
    assert action_key["name"] == "action" and all(name in action_key["description"] for name in ACTIONS)
    for command, name in COMMANDS.items():
        fields = set(ACTIONS[name].config.model_fields)
        assert fields <= tool_keys, f"{name}: keys the tool does not list: {fields - tool_keys}"
        flags = {a.dest for a in subcommands[command]._actions} - {"help", "config"}
        assert flags == fields - {"action"}, f"{command}: CLI flags differ from the config keys"
        required = _required(ACTIONS[name].config)
        argv = [command, *(f"--{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in required.items())]
        args, extra = parser.parse_known_args(argv)
        from_cli = parse(params_from_args(args, name, extra))
        assert from_cli.model_dump() == parse({"action": name, **required}).model_dump(), command


def _required(model: type) -> dict:
    values = {"model_path": "/tmp", "models": {"a": "/tmp"}, "output_dir": "/tmp/x",
              "space": {"learning_rate": [1e-5, 2e-5]}, "base": {}}
    return {k: v for k, v in values.items() if k in model.model_fields and model.model_fields[k].is_required()}


def _loaded_after(validation: str, modules: tuple[str, ...]) -> str:
    """Which of `modules` a fresh interpreter has loaded after running `validation` (TrainConfig imported)."""
    code = (f"import sys\nfrom hello_agents_rl.config import TrainConfig\n{validation}"
            f"print(sorted(m for m in {modules!r} if m in sys.modules))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_config_layer_imports_no_engine() -> None:
    """Validating a train config (tools, scheduler, rewards included) loads no torch, transformers, PEFT or TRL."""
    validation = ("TrainConfig(model_name='org/m', lr_scheduler_type='cosine', tools=['calculator'], "
                  "reward_type='combined', reward_config={'components': [{'type': 'accuracy', 'weight': 1.0}]})\n")
    loaded = _loaded_after(validation, ("torch", "transformers", "peft", "trl", "datasets", "accelerate"))
    assert loaded == "[]", f"validation imported engines: {loaded}"



def test_counts_are_bounded_at_validation_naming_the_key() -> None:
    from hello_agents_rl.config import MAX_COUNT

    for params in ({"max_steps": 10**30}, {"batch_size": MAX_COUNT + 1}, {"max_samples": 10**30},
                   {"sft": {"save_steps": 10**30}}):
        key = next(iter(params))
        with pytest.raises(ConfigError, match=f"`{key}.*less than or equal to {MAX_COUNT}"):
            parse({"action": "pipeline" if key == "sft" else "train", "output_dir": "/tmp/x", **params})
    with pytest.raises(ConfigError, match="`seed`.*less than or equal to 4294967295"):
        parse({"seed": 2**40, "output_dir": "/tmp/x"})
    with pytest.raises(ConfigError, match="`n_trials`"):
        parse({"action": "search", "output_dir": "/tmp/x", "n_trials": 10**30, "space": {"kl_coef": [0.01]}})
    assert parse({"max_steps": MAX_COUNT, "output_dir": "/tmp/x"}).max_steps == MAX_COUNT


@pytest.mark.parametrize("dataset", [5, 2.5, None, ["question"], {"train": "rows"}])
def test_a_dataset_of_another_type_is_refused_at_validation(dataset: object) -> None:
    with pytest.raises(ConfigError, match="`dataset`: unsupported"):
        parse({"action": "load_dataset", "dataset": dataset})


def test_numbers_in_yaml_read_the_same_in_a_search_space_as_anywhere(tmp_path: Path) -> None:
    """PyYAML reads an unquoted 1e-3 as the string '1e-3'; a train key takes it as 0.001, and so does the space."""
    import optuna

    from hello_agents_rl.interfaces.cli import load_config_file
    from hello_agents_rl.workflows.search import _suggest

    config = tmp_path / "search.yaml"
    config.write_text(
        f"output_dir: {tmp_path / 'search'}\n"
        "base: {dataset: arithmetic, learning_rate: 1e-5}\n"
        "space:\n"
        "  learning_rate: {low: 1e-6, high: 1e-3, log: true}\n"
        "  kl_coef: [1e-3, 5e-2]\n"
        "  max_grad_norm: {low: 1e-1, high: 1, step: 1e-1}\n"
        "  steps_per_generation: {low: 1, high: 4}\n"
        "enqueue: [{learning_rate: 1e-4, kl_coef: 1e-3}]\n"
    )
    params = load_config_file(str(config))
    assert params["space"]["learning_rate"]["low"] == "1e-6", "PyYAML gives a string: the case this test is about"
    cfg = parse({"action": "search", **params})
    assert cfg.base["learning_rate"] == "1e-5" and cfg.trial_config({}, 0).learning_rate == 1e-5
    assert cfg.space["learning_rate"] == {"low": 1e-6, "high": 1e-3, "log": True}
    assert cfg.space["kl_coef"] == [1e-3, 5e-2]
    assert cfg.space["max_grad_norm"] == {"low": 0.1, "high": 1.0, "step": 0.1}
    assert cfg.enqueue == [{"learning_rate": 1e-4, "kl_coef": 1e-3}]
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    drawn = {key: _suggest(trial, key, spec) for key, spec in cfg.space.items()}
    assert 1e-6 <= drawn["learning_rate"] <= 1e-3 and drawn["kl_coef"] in (1e-3, 5e-2)
    assert isinstance(drawn["steps_per_generation"], int), "an optional count is still drawn as an integer"
    with pytest.raises(ConfigError, match="`space.lora_rank.low`: lora_rank takes an integer \\(got '1e-3'\\)"):
        parse({"action": "search", "output_dir": str(tmp_path / "s"), "base": {"dataset": "arithmetic"},
               "space": {"lora_rank": {"low": "1e-3", "high": 8}}})


def test_a_user_tool_is_checked_by_transformers_schema_reader_alone() -> None:
    """A user's tool is described to the model by transformers' get_json_schema, so validating one imports
    transformers (and torch, which its type table reads); never the trainer stack."""
    validation = ("def add(a: int, b: int) -> int:\n"
                  "    '''Add two numbers.\n\n    Args:\n        a: The first.\n        b: The second.\n    '''\n"
                  "    return a + b\n"
                  "TrainConfig(model_name='org/m', tools=[add])\n")
    loaded = _loaded_after(validation, ("peft", "trl", "datasets", "accelerate"))
    assert loaded == "[]", f"validating a user tool imported the trainer stack: {loaded}"
