"""Run one RLTrainingTool action under `accelerate launch` / `torchrun` and leave per-rank evidence behind.

    accelerate launch --multi_gpu --num_processes 2 scripts/dist_probe.py params.json DUMP_DIR

Each rank writes into DUMP_DIR:
  result-rank{r}.json        the dict RLTrainingTool().run returned on that rank
  weights-rank{r}.safetensors its trainable weights right after trainer.train()
  seen-rank{r}.jsonl          the examples its dataloader fed it (and, for GRPO with
                              "record_prompts": true, the prompts its reward scored)
tests/test_distributed.py compares them; it is also a template for a training script of your own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def main(params_file: str, dump_dir: str) -> None:
    from safetensors.torch import save_file
    from transformers import Trainer

    from hello_agents.tools import RLTrainingTool

    rank = int(os.environ.get("RANK", "0"))
    dump = Path(dump_dir)
    dump.mkdir(parents=True, exist_ok=True)
    seen = dump / f"seen-rank{rank}.jsonl"
    params: dict[str, Any] = json.loads(Path(params_file).read_text())

    def record(kind: str, value: Any) -> None:
        with seen.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"kind": kind, "value": value}) + "\n")

    if params.pop("record_prompts", False):
        def length_reward(completion: str, ground_truth: Any, prompt: Any = None) -> float:
            # A signal from step 1 even for a random model: shorter completions score higher.
            record("reward_prompt", prompt)
            return -len(completion) / 100.0

        params["reward_type"] = length_reward

    train = Trainer.train

    def recording_train(self: Trainer, *args: Any, **kwargs: Any) -> Any:
        collate = self.data_collator

        def collator(features: list[dict[str, Any]]) -> Any:
            for feature in features:
                record("batch", feature.get("prompt") if "prompt" in feature else feature.get("input_ids"))
            return collate(features)

        self.data_collator = collator
        output = train(self, *args, **kwargs)
        model = self.accelerator.unwrap_model(self.model)
        weights = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}
        save_file(weights, str(dump / f"weights-rank{rank}.safetensors"))
        return output

    Trainer.train = recording_train
    result = RLTrainingTool().run(params)
    (dump / f"result-rank{rank}.json").write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:3])
