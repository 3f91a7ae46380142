"""Run one training under `accelerate launch` / `torchrun` and leave per-rank evidence behind.

    accelerate launch --multi_gpu --num_processes 2 scripts/dist_probe.py DUMP_DIR params.json
    accelerate launch --multi_gpu --num_processes 2 scripts/dist_probe.py DUMP_DIR --cli train --config run.yaml

The first form calls RLTrainingTool().run(params) from a script (params.json may add
"record_prompts": true for GRPO: a length reward that also records the prompts it scores);
the second runs the `hello-agents-rl` command line itself. Each rank writes into DUMP_DIR:
  result-rank{r}.json          the dict RLTrainingTool().run returned on that rank
  weights-rank{r}.safetensors  its trainable weights right after trainer.train()
  seen-rank{r}.jsonl           the training set, what its dataloader fed it, the prompts its reward scored,
                               and at each from_pretrained what transformers saw (FSDP, ZeRO-3, process group)
tests/test_distributed.py compares them. PROBE_COLLECTIVE_SAVE=1 sends the final save down the
DeepSpeed/FSDP path (all ranks gather, rank 0 merges the saved adapter) even under DDP. On a GPU
machine the same commands run on the GPUs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _local(param: Any) -> Any:
    """A plain CPU tensor; FSDP2's sharded DTensors are gathered first (every rank calls this)."""
    tensor = param.detach()
    if hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.cpu().contiguous()


def main(dump_dir: str, args: list[str]) -> int:
    from safetensors.torch import save_file
    from transformers import Trainer

    from hello_agents_rl.interfaces.tool import RLTrainingTool  # not through the start-up hook: it may be absent

    rank = int(os.environ.get("RANK", "0"))
    dump = Path(dump_dir)
    dump.mkdir(parents=True, exist_ok=True)
    seen = dump / f"seen-rank{rank}.jsonl"

    def record(kind: str, value: Any) -> None:
        with seen.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"kind": kind, "value": value}) + "\n")

    train = Trainer.train

    def recording_train(self: Trainer, *args: Any, **kwargs: Any) -> Any:
        collate = self.data_collator

        def example(feature: dict[str, Any]) -> Any:
            return feature["input_ids"] if "input_ids" in feature else feature.get("prompt")

        def collator(features: list[dict[str, Any]]) -> Any:
            for feature in features:
                record("batch", example(feature))
            return collate(features)

        for row in self.train_dataset:
            record("dataset", example(row))

        self.data_collator = collator
        record("setup", {"distributed_type": str(self.accelerator.distributed_type), "num_processes": self.accelerator.num_processes,
                         "device": str(self.accelerator.device), "fsdp": self.is_fsdp_enabled, "deepspeed": self.is_deepspeed_enabled})
        output = train(self, *args, **kwargs)
        record("model_type", type(self.model_wrapped).__name__)
        model = self.accelerator.unwrap_model(self.model)
        weights = {n: _local(p) for n, p in model.named_parameters() if p.requires_grad}
        save_file(weights, str(dump / f"weights-rank{rank}.safetensors"))
        return output

    import hello_agents_rl.workflows.actions as actions

    run = actions.run  # what the tool and the CLI both call

    def recording_run(params: dict[str, Any]) -> dict[str, Any]:
        result = run(params)
        (dump / f"result-rank{rank}.json").write_text(json.dumps(result, indent=2, default=str))
        return result

    from transformers import PreTrainedModel, modeling_utils

    from_pretrained = PreTrainedModel.from_pretrained.__func__

    def recording_from_pretrained(cls: type, *args: Any, **kwargs: Any) -> Any:
        import torch.distributed as dist

        record("load", {"fsdp": modeling_utils.is_fsdp_enabled(), "zero3": modeling_utils.is_deepspeed_zero3_enabled(),
                        "process_group": dist.is_available() and dist.is_initialized()})
        return from_pretrained(cls, *args, **kwargs)

    PreTrainedModel.from_pretrained = classmethod(recording_from_pretrained)
    Trainer.train = recording_train
    actions.run = recording_run
    if os.environ.get("PROBE_COLLECTIVE_SAVE") == "1":
        # Take the DeepSpeed/FSDP branch of the final save under plain DDP: every rank calls
        # trainer.save_model, rank 0 merges the saved adapter on CPU. Lets CPU tests reach that code.
        import hello_agents_rl.outputs as outputs

        outputs.saves_collectively = lambda trainer: True
    if args[0] == "--cli":
        from hello_agents_rl.cli import main as cli_main

        cli_main(args[1:])  # exits with the command's status
        return 0
    params: dict[str, Any] = json.loads(Path(args[0]).read_text())
    if params.pop("record_prompts", False):

        def length_reward(completion: str, ground_truth: Any, prompt: Any = None) -> float:
            record("reward_prompt", prompt)
            return -len(completion) / 100.0  # a signal from step 1 even for a random model

        params["reward_type"] = length_reward
    RLTrainingTool().run(params)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
