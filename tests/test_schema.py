"""JSON Schema of every action, as an agent sees it: the book's calls validate, bad ones are refused."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hello_agents.tools import RLTrainingTool
from pydantic import TypeAdapter

from hello_agents_rl.config import MAX_COUNT, describe_fields
from hello_agents_rl.interfaces.schema import json_schema, openai_tools
from hello_agents_rl.workflows.actions import ACTIONS

# The book's calls (section 11.4 and the README), verbatim apart from the "..." placeholders.
BOOK_EXAMPLES = [
    {"action": "train", "algorithm": "grpo", "model_name": "./models/sft_full", "output_dir": "./models/grpo_model",
     "max_samples": 100, "num_epochs": 3, "batch_size": 4, "learning_rate": 1e-5, "num_generations": 4,
     "kl_coef": 0.05, "use_lora": True, "lora_rank": 16, "lora_alpha": 32, "reward_type": "accuracy"},
    {"action": "train", "algorithm": "sft", "model_name": "Qwen/Qwen3-0.6B", "output_dir": "./models/sft_full",
     "dataset": "gsm8k", "dataset_path": "data/gsm8k"},
    {"action": "train", "algorithm": "grpo", "model_name": "./models/sft_tools", "dataset": "multiplication",
     "tools": ["calculator"], "max_tool_turns": 4, "reward_type": "accuracy", "num_generations": 8},
    {"action": "train", "kl_target": [0.01, 0.1], "reward_type": "length_penalty",
     "reward_config": {"target_length": 30, "penalty_weight": 1.0}},
    {"action": "evaluate", "model_path": "./models/grpo_model", "max_samples": 200},
    {"action": "compare", "models": {"base": "Qwen/Qwen3-0.6B", "sft": "./models/sft_full", "grpo": "./models/grpo_model"}},
    {"action": "create_reward", "reward_type": "combined",
     "reward_config": {"components": [{"type": "accuracy", "weight": 1.0}, {"type": "step", "weight": 0.5}]},
     "completions": ["... Final Answer: 72"], "ground_truth": 72},
    {"action": "search", "base": {"algorithm": "grpo"}, "space": {"kl_coef": [0.01, 0.05, 0.1]},
     "sampler": "tpe", "n_trials": 20, "objective": "accuracy", "storage": "sqlite:///runs/search.db"},
]

BAD = [  # (action, arguments, the key the validator names)
    ("train", {"kl_coeff": 0.05}, "kl_coeff"),  # the book's typo
    ("train", {"algorithm": "ppo"}, "algorithm"),
    ("train", {"num_generations": 1}, "num_generations"),
    ("train", {"learning_rate": "fast"}, "learning_rate"),
    ("train", {"kl_target": [0.01]}, "kl_target"),
    ("train", {"reward_type": "accuracyy"}, "reward_type"),
    ("evaluate", {"max_samples": 200}, "model_path"),  # required
    ("export", {"model_path": "./m"}, "output_dir"),
]


def _validator(action: str) -> jsonschema.Draft202012Validator:
    schema = json_schema(action)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("example", BOOK_EXAMPLES, ids=[f"{e['action']}-{i}" for i, e in enumerate(BOOK_EXAMPLES)])
def test_the_books_calls_validate(example: dict) -> None:
    errors = list(_validator(example["action"]).iter_errors(example))
    assert not errors, [e.message for e in errors]


@pytest.mark.parametrize(("action", "arguments", "key"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_call_is_refused_naming_its_key(action: str, arguments: dict, key: str) -> None:
    errors = list(_validator(action).iter_errors(arguments))
    assert errors
    assert any(key in e.message or key in e.json_path for e in errors), [e.message for e in errors]


@pytest.mark.parametrize("action", list(ACTIONS))
def test_schema_matches_the_config_model(action: str) -> None:
    schema = json_schema(action)
    model = ACTIONS[action].config
    assert list(schema["properties"]) == list(model.model_fields)
    assert schema.get("required", []) == [n for n, f in model.model_fields.items() if f.is_required()]
    for name, _default, text in describe_fields(model):
        if name != "action":
            assert schema["properties"][name]["description"] == text
    json.dumps(schema, allow_nan=False)  # plain JSON, no Python objects


def test_defaults_enums_and_python_only_keys_degrade_to_json() -> None:
    props = json_schema("train")["properties"]
    assert props["num_generations"]["default"] == 4 and props["num_generations"]["minimum"] == 2
    assert props["max_steps"]["maximum"] == MAX_COUNT  # an agent sees the bound validation holds counts to
    assert props["report_to"]["default"] == ["tensorboard"]  # a default_factory is listed too
    assert set(props["loss_type"]["enum"]) == {"grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo"}
    assert props["dataset"]["type"] == "string"  # a datasets.Dataset only from Python
    assert "accuracy" in props["reward_type"]["enum"]  # a callable only from Python
    assert props["tools"]["items"] == {"type": "string"}
    assert "prefixItems" not in json.dumps(props)  # kl_target as a plain array


def test_openai_tools_are_valid_function_tools() -> None:
    from openai.types.chat import ChatCompletionFunctionToolParam

    tools = RLTrainingTool().openai_tools()
    assert [t["function"]["name"] for t in tools] == list(ACTIONS)
    adapter = TypeAdapter(ChatCompletionFunctionToolParam)
    for tool in tools:
        adapter.validate_python(tool)
        jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
        assert "$schema" not in tool["function"]["parameters"]
    # a model's call comes back as JSON arguments: they validate against the same schema
    arguments = json.loads('{"model_path": "./models/grpo_model", "max_samples": 50}')
    jsonschema.validate(arguments, next(t for t in tools if t["function"]["name"] == "evaluate")["function"]["parameters"])
    assert openai_tools(["train"])[0]["function"]["parameters"]["additionalProperties"] is False


def test_the_parameter_listing_is_hello_agents_shape_and_follows_the_schema() -> None:
    tool = RLTrainingTool()
    params = {p["name"]: p for p in tool.get_parameters()}
    assert {"kl_coef", "num_generations", "model_path"} <= set(params)
    assert all(set(p) == {"name", "type", "description", "required", "default"} for p in params.values())
    # types and defaults come from the same schema the JSON callers get; which actions read a key is said
    train = json_schema("train")["properties"]
    assert params["kl_coef"]["type"] == train["kl_coef"]["type"] == "number"
    assert params["kl_coef"]["default"] == train["kl_coef"]["default"]
    assert params["num_generations"]["type"] == "integer" and params["use_lora"]["type"] == "boolean"
    assert "(actions: evaluate" in params["model_path"]["description"]
    assert [p["name"] for p in params.values() if p["required"]] == ["action"]
    assert tool.json_schema("evaluate")["required"] == ["model_path"]


def test_a_function_call_from_a_model_runs_as_given() -> None:
    """What an agent loop does with a tool call: name + JSON arguments -> run() -> a JSON result."""
    tool = RLTrainingTool()
    names = {t["function"]["name"] for t in tool.openai_tools()}
    call = {"name": "create_reward", "arguments": json.dumps(
        {"reward_type": "accuracy", "completions": ["Final Answer: 72", "Final Answer: 70"], "ground_truth": 72})}
    assert call["name"] in names
    arguments = json.loads(call["arguments"])
    jsonschema.validate(arguments, json_schema(call["name"]))
    result = tool.run({**arguments, "action": call["name"]})
    assert result["scores"] == [1.0, 0.0]
    json.dumps(result)  # plain JSON back to the model
