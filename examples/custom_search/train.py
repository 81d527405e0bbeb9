"""The trial of the custom search example: a Core API loop fitting y = 3x - 1 with SGD on
tiny synthetic CPU data. The search tunes ``lr`` and ``momentum``; the searcher metric is the
validation mean squared error after the trial has trained ``op.length`` batches."""

from __future__ import annotations

import json

import torch

import determined as det
from determined import core


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(256, 1, generator=g) * 2 - 1
    y = 3 * x - 1 + 0.05 * torch.randn(256, 1, generator=g)
    return x, y


def main(ctx: core.Context) -> None:
    info = det.get_cluster_info()
    assert info is not None, "run this as a trial of the custom search"
    hp = info.trial.hparams
    torch.manual_seed(info.trial.trial_seed)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=hp["lr"], momentum=hp["momentum"])
    x, y = make_data(0)
    vx, vy = make_data(1)
    batches = 0
    if info.latest_checkpoint is not None:  # resume where the last run checkpointed
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            state = torch.load(path / "state.pt")
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            batches = json.loads((path / "meta.json").read_text())["batches"]
    for op in ctx.searcher.operations():
        while batches < op.length:
            i = (batches * 32) % 256
            loss = torch.nn.functional.mse_loss(model(x[i : i + 32]), y[i : i + 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
            batches += 1
            if batches % 10 == 0 or batches == op.length:
                ctx.train.report_training_metrics(batches, {"loss": float(loss)})
            op.report_progress(batches)
        with torch.no_grad():
            val = float(torch.nn.functional.mse_loss(model(vx), vy))
        if val != val or val > 1e6:  # diverged: report a large, finite loss
            val = 1e6
        ctx.train.report_validation_metrics(batches, {"validation_mse": val})
        with ctx.checkpoint.store_path({"steps_completed": batches}) as (path, _):
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path / "state.pt")
            (path / "meta.json").write_text(json.dumps({"batches": batches}))
        op.report_completed(val)


if __name__ == "__main__":
    with core.init() as context:
        main(context)
