"""The fast trainer runs only where it was verified, and says so when it does not (coupling.py,
trainers/fast/verified.py): a renamed TRL attribute, a loss TRL no longer scales for gradient accumulation or an
unverified device turns it off for the run, the reason recorded in `fast_path` and warned, never silently."""

from __future__ import annotations

from pathlib import Path

import pytest
import trl
from test_performance_semantics import _fast_trainer, _prompts

from hello_agents_rl import coupling
from hello_agents_rl.trainers.fast import verified
from hello_agents_rl.trainers.fast.dropout import FastDropout


def _trl_with(monkeypatch: pytest.MonkeyPatch, change) -> list[int]:
    """TRL's GRPOTrainer changed so that its instances `change` after its __init__ (as a TRL release that renamed
    something would be); returns the list its own rollout method appends to when TRL's code runs."""
    calls: list[int] = []
    original_init = trl.GRPOTrainer.__init__

    def changed_init(self, *args, **kwargs) -> None:
        original_init(self, *args, **kwargs)
        change(self)

    def trls_rollout(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        calls.append(len(prompt_ids))
        return [[2] for _ in prompt_ids], None

    monkeypatch.setattr(trl.GRPOTrainer, "__init__", changed_init)  # FastGRPOTrainer's base is this class
    monkeypatch.setattr(trl.GRPOTrainer, "_generate_single_turn", trls_rollout)
    return calls


def _renamed(old: str, new: str):
    def rename(trainer) -> None:
        setattr(trainer, new, trainer.__dict__.pop(old))

    return rename


def _assert_off_for_the_run(trainer, calls: list[int], reason_part: str, capsys, caplog) -> None:
    reasons = [f["reason"] for f in trainer.fast_path["fallbacks"] if f["part"] == "all"]
    assert len(reasons) == 1 and reason_part in reasons[0], trainer.fast_path["fallbacks"]
    assert reason_part in capsys.readouterr().out, "printed for the user"
    assert any(reason_part in r.getMessage() and r.levelname == "WARNING" for r in caplog.records), "and logged"
    assert not any(isinstance(m, FastDropout) for m in trainer.model.modules()), "PEFT's own dropout kept"
    trainer._generate_single_turn(_prompts(trainer.processing_class, 2, 2), None, {}, 2)
    assert calls == [4], "TRL's own rollout ran"
    assert trainer.fast_path["counts"]["generate_completions"] == 4 and trainer.fast_path["sampler"] is False


@pytest.mark.parametrize("attribute", ["_is_vlm", "_entropy_bonus_enabled", "_metrics"])
def test_a_renamed_trl_attribute_turns_the_fast_path_off_visibly(tiny_model: str, tmp_path: Path, monkeypatch,
                                                                 capsys, caplog, attribute: str) -> None:
    """Each of these was read with a default or would fail mid-run: a rename must name itself at start."""
    calls = _trl_with(monkeypatch, _renamed(attribute, attribute + "_v2"))
    trainer = _fast_trainer(tiny_model, tmp_path, dropout=0.05, max_completion_length=8)
    _assert_off_for_the_run(trainer, calls, f"no attribute {attribute}", capsys, caplog)


def test_a_loss_not_scaled_for_gradient_accumulation_turns_the_fast_path_off(tiny_model: str, tmp_path: Path,
                                                                            monkeypatch, capsys, caplog) -> None:
    """The chunked loss backpropagates TRL's per-chunk loss as is: right only while TRL scales it for gradient
    accumulation itself (transformers' Trainer.loss_is_scaled_for_ga); otherwise the gradients would be
    gradient_accumulation_steps times too large."""
    calls = _trl_with(monkeypatch, lambda trainer: setattr(trainer, "loss_is_scaled_for_ga", None))
    trainer = _fast_trainer(tiny_model, tmp_path, dropout=0.05, max_completion_length=8)
    _assert_off_for_the_run(trainer, calls, "loss_is_scaled_for_ga is None", capsys, caplog)


def test_the_installed_trl_passes_every_check(tiny_model: str, tmp_path: Path) -> None:
    from trl import GRPOTrainer

    trainer = _fast_trainer(tiny_model, tmp_path, dropout=0.05)
    assert coupling.class_blocker(GRPOTrainer) is None
    assert coupling.instance_blocker(trainer, GRPOTrainer) is None
    assert trainer.fast_path["fallbacks"] == [] and trainer.fast_path["counts"]["fast_dropout_layers"] == 4 * 7
    listed = set(coupling.ATTRIBUTES_READ) | {coupling.GA_SCALING_FLAG} | set(coupling.DYNAMIC_SAMPLING_ATTRIBUTES)
    assert all(hasattr(trainer, name) for name in listed)
    assert coupling.dynamic_sampling_blocker(GRPOTrainer) is None


def test_dynamic_sampling_names_the_trl_method_it_misses() -> None:
    class Renamed(trl.GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions):  # a TRL that dropped completion_ids_list
            raise AssertionError

    assert "signature of Renamed._calculate_rewards" in coupling.dynamic_sampling_blocker(Renamed)


@pytest.mark.parametrize("device", ["cuda", "mps", "xpu"])
def test_devices_other_than_cpu_are_not_verified(device: str, monkeypatch) -> None:
    monkeypatch.delenv(verified.DEVICES_UNDER_TEST, raising=False)
    assert verified.device_blocker("cpu") is None
    why = verified.device_blocker(device)
    assert why.startswith(f"not verified on {device}:") and "test_fast_equivalence.py" in why and "gpu_check" in why
    monkeypatch.setenv(verified.DEVICES_UNDER_TEST, f"{device},cpu")  # what gpu_check.sh sets to verify one
    assert verified.device_blocker(device) is None


@pytest.mark.slow
def test_a_run_on_an_unverified_device_uses_trl_and_says_why(tiny_model: str, tmp_path: Path, monkeypatch,
                                                             capsys) -> None:
    """No GPU here: make CPU the unverified device, as CUDA or MPS are today, and train through the tool."""
    from hello_agents.tools import RLTrainingTool

    monkeypatch.setattr(verified, "VERIFIED_DEVICES", frozenset({"cuda"}))
    monkeypatch.delenv(verified.DEVICES_UNDER_TEST, raising=False)
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(tmp_path / "grpo"),
        "dataset": "arithmetic", "max_samples": 2, "max_steps": 1, "batch_size": 2, "num_generations": 2,
        "max_new_tokens": 4, "logging_steps": 1, "save_steps": 100, "report_to": ["none"],
    })
    record = result["fast_path"]
    why = ("not verified on cpu: tests/test_fast_equivalence.py has not passed there "
           "(benchmarks/gpu_check.sh runs it on a GPU)")
    assert [(f["part"], f["reason"]) for f in record["fallbacks"]] == [("all", why)]
    assert record["sampler"] is False and record["shared_prompt_forward"] is False
    assert record["counts"]["generate_completions"] == 4 and record["counts"].get("sampler_completions", 0) == 0
    assert capsys.readouterr().out.count(why) == 1



PACKAGE = Path(__file__).resolve().parents[1] / "src" / "hello_agents_rl"
# torch's own internals (tensor versions, MKL/oneDNN ops) are pinned by the verified torch, not by coupling.py
TORCH_INTERNALS = {"_version", "_C", "_mkl_linear", "_linear_pointwise", "_reorder_linear_weight",
                   "_mkl_reorder_linear_weight"}


def _private_names_used() -> dict[str, str]:
    """Every `x._name` (x not self/cls), `getattr(x, "_name")` and `from lib import _name` in the package."""
    import ast

    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) not in ("self", "cls", "os", "_thread"):
                names = [node.attr] if not ast.unparse(node.value).startswith("self.") else []
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr", "setattr"):
                names = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    found.setdefault(name, f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def _defined_here() -> set[str]:
    """Private names the package defines itself: its functions and classes, the names it assigns, the attributes
    it sets on its own objects (self, cls), a stand-in's keyword attributes. Not a method of a subclass that TRL's
    or transformers' base classes define too (an override), nor an attribute set on another library's class (a
    replacement): those are coupling, and coupling.py must list them."""
    import ast

    from transformers import Trainer, TrainerCallback

    foreign = (trl.GRPOTrainer, trl.SFTTrainer, Trainer, TrainerCallback)
    names = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        methods = {id(f) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body
                   if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not (id(node) in methods and any(hasattr(base, node.name) for base in foreign)):
                    names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for part in ast.walk(target):
                        if isinstance(part, ast.Name):
                            names.add(part.id)
                        elif isinstance(part, ast.Attribute) and ast.unparse(part.value) in ("self", "cls"):
                            names.add(part.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)  # SimpleNamespace(_tokenizer=...): a stand-in's attributes
    return {n for n in names if n.startswith("_")}


def test_an_override_or_a_replacement_of_another_librarys_private_method_counts_as_coupling() -> None:
    defined = _defined_here()
    assert "_get_tool_suffix_ids" not in defined, "agent_run.py overrides TRL's: not a name of ours"
    assert "_validate_request" not in defined, "transformers_serve.py replaces transformers': not a name of ours"
    assert {"_get_tool_suffix_ids", "_validate_request"} <= {name for _, _, name in coupling.REPLACED_METHODS}
    for module, owner, name in coupling.REPLACED_METHODS:
        assert coupling.replaced_blocker(module, owner, name) is None, (owner, name)


def test_a_replaced_method_whose_signature_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trl.GRPOTrainer, "_get_tool_suffix_ids", lambda self, messages, extra: [1])
    assert "changed the signature" in coupling.replaced_blocker("trl", "GRPOTrainer", "_get_tool_suffix_ids")
    from hello_agents_rl.trainers.agent_run import FinishEndsTheRollout

    with pytest.raises(RuntimeError, match="changed the signature of GRPOTrainer._get_tool_suffix_ids"):
        FinishEndsTheRollout()  # refused before TRL's trainer is built


def test_a_run_whose_log_lacks_a_metric_it_reads_says_which_once(capsys: pytest.CaptureFixture) -> None:
    from types import SimpleNamespace

    from hello_agents_rl.trainers.callbacks import ConsoleProgress

    console = ConsoleProgress()
    state = SimpleNamespace(is_world_process_zero=True, num_train_epochs=1, epoch=0.5, global_step=1, max_steps=2)
    args = SimpleNamespace(beta=0.05)
    renamed = {"loss": 0.1, "rewards/mean": 0.4, "kl": 0.01, "frac_reward_zero_std": 0.0,
               "completions/clipped_ratio": 0.0}
    console.on_log(args, state, None, logs=renamed)
    console.on_log(args, state, None, logs=renamed)
    out = capsys.readouterr().out
    assert out.count("TRL logged no reward (renamed in this TRL?)") == 1, out
    assert "reward feeds the console line, the doctor" in out
    quiet = ConsoleProgress()
    quiet.on_log(SimpleNamespace(beta=0.0), state, None,
                 logs={k: v for k, v in renamed.items() if k != "kl"} | {"reward": 0.4})
    assert "[warning]" not in capsys.readouterr().out, "no kl is expected with kl_coef 0"


def test_the_agent_needs_are_listed_in_coupling() -> None:
    from hello_agents_rl.rollouts.agent_spec import AGENT_NEEDS

    private = {part for need in AGENT_NEEDS for part in need.split(" or ") if part.startswith("_")}
    assert private and private <= set(coupling.HELLO_AGENTS_READS)


def test_every_private_name_of_another_library_is_listed_in_coupling() -> None:
    listed = {*coupling.OVERRIDDEN_METHODS, *(name for _, _, name in coupling.CALLED_METHODS),
              *(name for _, _, name in coupling.REPLACED_METHODS),
              coupling.BORROWED_METHOD[2], *coupling.BORROWED_READS, *coupling.ATTRIBUTES_READ,
              *coupling.HELLO_AGENTS_READS,
              *coupling.DYNAMIC_SAMPLING_METHODS, *coupling.DYNAMIC_SAMPLING_ATTRIBUTES}
    used = _private_names_used()
    unlisted = {n: where for n, where in used.items() if n not in listed | TORCH_INTERNALS | _defined_here()}
    assert unlisted == {}, "private names of other libraries used but not listed (and checked) in coupling.py"


def test_the_borrowed_tool_suffix_method_is_checked_and_its_stand_in_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    from hello_agents_rl.rollouts import loop

    assert coupling.borrowed_blocker() is None
    seen = {}
    def borrowed(self, tool_messages):
        seen.update(vars(self))
        return [1]

    monkeypatch.setattr(trl.GRPOTrainer, "_get_tool_suffix_ids", borrowed)
    assert loop._suffix_ids(object(), None, {}, [{"role": "tool", "content": "4"}]) == [1]
    assert set(seen) == set(coupling.BORROWED_READS), "the stand-in has exactly the attributes coupling.py lists"

    monkeypatch.setattr(trl.GRPOTrainer, "_get_tool_suffix_ids", lambda shim, messages, extra: [1])
    assert "changed the signature" in coupling.borrowed_blocker()
    with pytest.raises(RuntimeError, match="tool-result tokenizer.*changed the signature"):
        loop._suffix_ids(object(), None, {}, [])
