"""A Hugging Face Trainer script written as for Determined 0.37 (core.init, DetCallback,
resume_from_checkpoint): a one-layer GPT-2 built from a config (nothing downloaded) learning a
fixed synthetic token pattern. Hyperparameters: lr, max_steps, step_sleep."""

from __future__ import annotations

import time
from typing import Any

import torch
import transformers

import determined as det
from determined import core
from determined.transformers import DetCallback


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, 8, (n, 1), generator=g)
        self.ids = (start + torch.arange(12)) % 32

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Slow(transformers.TrainerCallback):
    """Gives a pause request time to arrive mid-training."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(self.seconds)


def main() -> None:
    hp = det.get_cluster_info().trial.hparams
    config = transformers.GPT2Config(
        vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2, n_inner=32
    )
    transformers.set_seed(7)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir="hf_out",
        max_steps=hp["max_steps"],
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        learning_rate=hp["lr"],
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=hp.get("eval_steps", 4),
        save_strategy="steps",
        save_steps=hp.get("save_steps", 4),
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        seed=7,
        dataloader_num_workers=0,
    )
    distributed = core.DistributedContext.from_torch_distributed()
    with core.init(distributed=distributed) as core_context:
        det_callback = DetCallback(
            core_context, args, filter_metrics=hp.get("filter_metrics"), user_data={"run": 1}
        )
        trainer = transformers.Trainer(
            model=model,
            args=args,
            train_dataset=Tokens(64, 1),
            eval_dataset=Tokens(16, 2),
            callbacks=[Slow(hp.get("step_sleep", 0.0))],
        )
        trainer.add_callback(det_callback)
        trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)


if __name__ == "__main__":
    main()
