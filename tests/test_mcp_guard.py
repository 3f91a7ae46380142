"""The MCP root guard: every path in a call's arguments, at any depth, is judged by the config models' path keys."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp")

from hello_agents_rl import ConfigError
from hello_agents_rl.interfaces.mcp_server import RLServer


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (elsewhere / "model").mkdir()
    (elsewhere / "d.jsonl").write_text('{"question": "What is 1 + 1?", "answer": "2"}\n')
    return root, elsewhere


def test_every_nested_path_is_refused_naming_its_key_before_anything_runs(places: tuple[Path, Path]) -> None:
    root, elsewhere = places
    model, data = str(elsewhere / "model"), str(elsewhere / "d.jsonl")
    search = {"output_dir": str(root / "s"), "base": {"dataset": "arithmetic"}}
    refused = [  # the reproductions, then the other nested sections
        ("search", {**search, "space": {"model_name": [model]}}, "space.model_name.0"),
        ("search", {**search, "space": {"dataset": ["arithmetic", data]}}, "space.dataset.1"),
        ("search", {**search, "space": {"dataset_path": [str(elsewhere)]}}, "space.dataset_path.0"),
        ("search", {**search, "space": {"kl_coef": [0.1]}, "enqueue": [{"kl_coef": 0.1, "model_name": model}]},
         "enqueue.0.model_name"),
        ("search", {**search, "base": {"dataset_path": str(elsewhere)}}, "base.dataset_path"),
        ("search", {**search, "evaluation": {"dataset": data}}, "evaluation.dataset"),
        ("search", {**search, "storage": f"sqlite:///{elsewhere}/study.db"}, "storage"),
        ("pipeline", {"output_dir": str(root / "p"), "sft": {"dataset_path": str(elsewhere)}}, "sft.dataset_path"),
        ("pipeline", {"output_dir": str(root / "p"), "grpo": {"model_name": model}}, "grpo.model_name"),
        ("pipeline", {"output_dir": str(root / "p"), "evaluation": {"dataset": data}}, "evaluation.dataset"),
        ("train", {"output_dir": str(root / "t"), "resume_from_checkpoint": str(elsewhere / "checkpoint-2")},
         "resume_from_checkpoint"),
        ("train", {"output_dir": str(root / "t"), "dataset_path": str(elsewhere)}, "dataset_path"),
        ("evaluate", {"model_path": model}, "model_path"),
        ("compare", {"models": {"base": "Qwen/Qwen3-0.6B", "mine": model}}, "models.mine"),
    ]
    server = RLServer([root])
    for name, arguments, key in refused:
        with pytest.raises(ConfigError, match=rf"`{key.replace('.', '[.]')}`: .* is outside"):
            server.call(name, arguments)
    assert list(root.iterdir()) == [root / ".jobs"] and server.jobs.list() == []  # nothing started, nothing made


def test_hub_ids_task_names_and_paths_under_the_root_pass(places: tuple[Path, Path]) -> None:
    root, _ = places
    guard = RLServer([root]).guard
    guard.check({"action": "search", "output_dir": str(root / "s"),
                 "space": {"model_name": ["Qwen/Qwen3-0.6B", str(root / "m")], "dataset": ["gsm8k", "reasoning_gym:leg_counting"],
                           "learning_rate": {"low": 1e-6, "high": 1e-4}},
                 "base": {"dataset_path": str(root / "gsm8k")}, "storage": f"sqlite:///{root}/study.db"})
    guard.check({"action": "compare", "models": {"base": "HuggingFaceTB/SmolLM2-135M-Instruct"}})


def test_storage_is_a_plain_sqlite_file_under_the_root(places: tuple[Path, Path]) -> None:
    root, elsewhere = places
    search = {"output_dir": str(root / "s"), "base": {"dataset": "arithmetic"}, "n_trials": 1}
    server = RLServer([root])
    refused = [  # SQLite reads `file:...?uri=true` as a URI naming any file: the old guard read it as a relative path
        f"sqlite:///file:{elsewhere}/uri.db?uri=true",
        f"sqlite:///{root}/study.db?uri=true",
        f"sqlite:///file:{root}/study.db",
        f"sqlite:///{root}/%2E%2E/elsewhere/x.db",
        "postgresql://user@db/optuna",
        "mysql://db/optuna",
    ]
    for storage in refused:
        with pytest.raises(ConfigError, match="`storage`"):
            server.call("search", {**search, "storage": storage})
    assert not (elsewhere / "uri.db").exists() and not list(Path.cwd().glob("file:*"))
    allowing = RLServer([root], storage_schemes=("postgresql",)).guard  # `mcp --allow-storage postgresql`
    allowing.check({"action": "search", "output_dir": str(root / "s"), "storage": "postgresql+psycopg2://db/optuna"})
    with pytest.raises(ConfigError, match="`storage`"):
        allowing.check({"action": "search", "output_dir": str(root / "s"), "storage": "mysql://db/optuna"})


def test_code_keys_are_refused_inside_search_choices(places: tuple[Path, Path]) -> None:
    root, _ = places
    guard = RLServer([root]).guard
    for space, key in [({"tools": [["calculator"], ["os:system"]]}, "space.tools.1.0"),
                       ({"trust_remote_code": [False, True]}, "space.trust_remote_code"),
                       ({"environment": ["mypkg.envs:Shop"]}, "space.environment")]:
        with pytest.raises(ConfigError, match=f"`{key}"):
            guard.check({"action": "search", "output_dir": str(root / "s"), "space": space})
    guard.check({"action": "search", "output_dir": str(root / "s"), "space": {"tools": [["calculator"], ["python"]]}})


def test_task_parameters_that_name_a_file_stay_under_the_root(places: tuple[Path, Path]) -> None:
    root, elsewhere = places
    secret = elsewhere / "secret.txt"
    secret.write_text("s3cr3tPassw0rd\n")
    (root / "link.txt").symlink_to(secret)
    spell = {"dataset": "reasoning_gym:spell_backward", "split": "test"}
    server = RLServer([root])
    escapes = [str(secret), "../" * 30 + str(secret).lstrip("/"), str(root / "link.txt"), f"{root}/../elsewhere/secret.txt"]
    for data_file in escapes:
        task = {**spell, "dataset_config": {"data_file": data_file, "size": 2, "max_word_len": 100}}
        calls = [  # every action that reads a task's rows, at every depth a dataset_config can sit
            ("load_dataset", task, "dataset_config.data_file"),
            ("train", {**task, "output_dir": str(root / "t")}, "dataset_config.data_file"),
            ("evaluate", {**task, "model_path": "org/model"}, "dataset_config.data_file"),
            ("search", {"output_dir": str(root / "s"), "base": task}, "base.dataset_config.data_file"),
            ("search", {"output_dir": str(root / "s"), "space": {"dataset_config": [{}, task["dataset_config"]]}},
             "space.dataset_config.1.data_file"),
            ("search", {"output_dir": str(root / "s"), "evaluation": task}, "evaluation.dataset_config.data_file"),
            ("pipeline", {"output_dir": str(root / "p"), "grpo": task}, "grpo.dataset_config.data_file"),
        ]
        for name, arguments, key in calls:
            with pytest.raises(ConfigError, match=rf"`{key.replace('.', '[.]')}`: .*(outside|climbs out)"):
                server.call(name, arguments)
    # any key, any depth: a path is judged by its shape, a file-like key by its name
    for nested in ({"words": [str(secret)]}, {"corpus": {"words_file": "notes.txt"}}, {"source": "~/notes.txt"}):
        with pytest.raises(ConfigError, match="outside"):
            server.guard.check({"action": "load_dataset", **spell, "dataset_config": nested})
    assert server.jobs.list() == []

    (root / "words.txt").write_text("zebra\n")  # a word list under the root is the user's to use
    inside = server.call("load_dataset", {**spell, "dataset_config": {"data_file": str(root / "words.txt"), "size": 1}})
    assert "zebra" in inside["sample"]["prompt"][-1]["content"]
    server.guard.check({"action": "load_dataset", "dataset": "reasoning_gym:basic_arithmetic",  # "/" is an operator
                        "dataset_config": {"operators": ["+", "-", "*", "/"]}})


def test_a_task_ref_carries_task_parameters_and_is_judged_alike(places: tuple[Path, Path]) -> None:
    import json

    root, elsewhere = places
    server = RLServer([root])
    ref = {"task": "spell_backward", "params": {"data_file": str(elsewhere / "secret.txt"), "size": 2},
           "seed": 1_000_000_000, "index": 0}
    for task_ref, key in [(json.dumps(ref), "task_ref.params.data_file"),
                          ([json.dumps({**ref, "params": {"size": 2}}), json.dumps(ref)], "task_ref.1.params.data_file")]:
        with pytest.raises(ConfigError, match=rf"`{key.replace('.', '[.]')}`: .* is outside"):
            server.call("create_reward", {"completions": ["Final Answer: x", "Final Answer: y"], "task_ref": task_ref})
