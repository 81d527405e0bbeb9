"""Per-batch cost on a GPU, with and without AMP: a hand-written loop, our PyTorchTrial +
Trainer, Determined 0.37's, and Lightning's, in one run (issue 32 part 3; run by
benchmarks/gpu_check.sh).

Each variant trains the same MLP on the same data (on the host, moved per batch, as a loader
gives it) for ``short`` and ``long`` batches in its own process (ours and 0.37 are both the
``determined`` package); the marginal cost per batch is ``(t(long) - t(short)) / (long -
short)`` in wall time, the device synchronised before each clock read, best of ``--reps``.

* ``plain``: ``for x, y in DataLoader: x, y = x.to(dev), y.to(dev); loss; zero_grad;
  backward; step``; with AMP, ``torch.autocast`` around the forward pass and a GradScaler
  (torch's recipe), the loss summed on the device, read every 100 batches.
* ``ours`` / ``det037``: a PyTorchTrial (``context.experimental.use_amp()`` with AMP) run by
  ``det.pytorch.init()`` + ``Trainer.fit`` locally; ``det037`` imports Determined 0.37 from
  ``--det037-path`` (a site-packages folder holding it) and runs in an empty temporary
  directory (its local Trainer copies the working directory into checkpoints).
* ``ours_fwd``: ours with 0.37's AMP scope, to tell where an AMP difference comes from:
  ``use_amp()`` autocasts all of ``train_batch`` (loss and optimizer step included) where
  0.37 autocasts the model's forward pass only; here ``autocast_forward_pass(model)`` and a
  wrapped GradScaler the trial steps and updates itself. Same as ``ours`` without AMP.
* ``lightning``: a LightningModule, ``Trainer(precision="16-mixed")`` with AMP, no logger,
  checkpointing or progress bar; skipped when ``lightning`` is not importable.

    python benchmarks/gpu_overhead.py                      # every variant, CUDA, AMP on and off
    python benchmarks/gpu_overhead.py --device cpu --variants plain,ours --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
VARIANTS = ("plain", "ours", "ours_fwd", "det037", "lightning")
WIDTH, DEPTH, BATCH, RECORDS = 2048, 4, 512, 16384
NOT_INSTALLED = 3  # a child's exit status: the variant's package is not importable


# ---- the workload (runs in the variant's process) ----------------------------------------------


def _data() -> Any:
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(RECORDS, WIDTH, generator=g)
    return torch.utils.data.TensorDataset(x, torch.randint(0, 10, (RECORDS,), generator=g))


def _model() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10))


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def run_plain(batches: int, device: str, amp: bool) -> None:
    import torch
    from torch import nn

    model = _model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(device, enabled=amp)
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    loader = torch.utils.data.DataLoader(_data(), batch_size=BATCH, shuffle=True)
    done, running = 0, torch.zeros((), device=device)
    while done < batches:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device, dtype=dtype, enabled=amp):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            running += loss.detach().float()
            done += 1
            if done % 100 == 0:
                running.zero_()
            if done == batches:
                break


def _trial_class(amp: bool, forward_only: bool = False) -> type:
    import torch
    from torch import nn

    from determined import pytorch

    class Bench(pytorch.PyTorchTrial):
        def __init__(self, context: Any) -> None:
            self.context = context
            self.scaler = None
            if amp and forward_only:
                self.scaler = context.wrap_scaler(torch.amp.GradScaler(context.device.type))
            elif amp:
                context.experimental.use_amp()
            self.model = context.wrap_model(_model())
            if self.scaler is not None:
                self.model = context.autocast_forward_pass(self.model)
            sgd = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
            self.opt = context.wrap_optimizer(sgd)

        def build_training_data_loader(self) -> Any:
            return pytorch.DataLoader(_data(), batch_size=BATCH, shuffle=True)

        def build_validation_data_loader(self) -> Any:
            val = torch.utils.data.Subset(_data(), range(2 * BATCH))
            return pytorch.DataLoader(val, batch_size=BATCH)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = nn.functional.cross_entropy(self.model(x), y)
            if self.scaler is None:
                self.context.backward(loss)
                self.context.step_optimizer(self.opt)
            else:  # the wrap_scaler pattern: the trial scales, steps through and updates it
                self.context.backward(self.scaler.scale(loss))
                self.context.step_optimizer(self.opt, scaler=self.scaler)
                self.scaler.update()
            return {"loss": loss}

        def evaluate_batch(self, batch: Any) -> Any:
            x, y = batch
            return {"validation_loss": nn.functional.cross_entropy(self.model(x), y)}

    return Bench


def run_determined(batches: int, device: str, amp: bool, forward_only: bool = False) -> None:
    from determined import pytorch

    with pytorch.init(hparams={}) as context:
        trial = _trial_class(amp, forward_only)(context)
        pytorch.Trainer(trial, context).fit(
            max_length=pytorch.Batch(batches),
            reporting_period=pytorch.Batch(100),
            checkpoint_policy="none",
        )


def _lightning() -> Any:
    try:
        import lightning
    except ImportError:
        import pytorch_lightning as lightning  # the older package name
    return lightning


def run_lightning(batches: int, device: str, amp: bool) -> None:
    import torch

    lightning = _lightning()
    from torch import nn

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _model()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return nn.functional.cross_entropy(self.model(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    trainer = lightning.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        precision=("16-mixed" if device == "cuda" else "bf16-mixed") if amp else "32-true",
        max_steps=batches,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=100,
    )
    loader = torch.utils.data.DataLoader(_data(), batch_size=BATCH, shuffle=True)
    trainer.fit(Module(), loader)


RUNNERS = {
    "plain": run_plain,
    "ours": run_determined,
    "ours_fwd": lambda n, device, amp: run_determined(n, device, amp, forward_only=True),
    "det037": run_determined,
    "lightning": run_lightning,
}


def child(variant: str, device: str, amp: bool, lengths: list[int]) -> dict[str, Any]:
    """In the variant's process: a warm-up run, then one timed run per length (and which
    determined it imported)."""
    import logging

    import torch

    logging.disable(logging.INFO)
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    if device == "cpu":  # a smoke test on a shared machine: no thread pool to oversubscribe
        torch.set_num_threads(1)
    if variant == "lightning":
        try:
            _lightning()
        except ImportError:
            raise SystemExit(NOT_INSTALLED) from None
    fn = RUNNERS[variant]
    fn(min(lengths), device, amp)
    out: dict[str, Any] = {}
    if variant in ("ours", "ours_fwd", "det037"):
        import determined

        out["version"] = f"determined {determined.__version__} from {determined.__file__}"
    for n in lengths:
        _sync(device)
        start = time.perf_counter()
        fn(n, device, amp)
        _sync(device)
        out[str(n)] = time.perf_counter() - start
    return out


# ---- the driver ----------------------------------------------------------------------------------


def _env(variant: str, det037: str | None) -> dict[str, str] | None:
    env = dict(os.environ)
    env["DET_HOME"] = tempfile.mkdtemp(prefix="det-gpu-overhead-")
    if variant == "det037":
        if not det037:
            return None
        # 0.37 first, and not our checkout: both are the ``determined`` package.
        rest = [p for p in env.get("PYTHONPATH", "").split(":") if p and p != str(HERE.parent)]
        env["PYTHONPATH"] = ":".join([det037, *rest])
    else:
        env["PYTHONPATH"] = ":".join(
            [str(HERE.parent), *[p for p in env.get("PYTHONPATH", "").split(":") if p]]
        )
    return env


def measure(variant: str, device: str, amp: bool, args: argparse.Namespace) -> float | str:
    env = _env(variant, args.det037_path)
    if env is None:
        return "skipped (no --det037-path)"
    lengths = [args.short, args.long]
    best: dict[str, float] = {}
    version = None
    for _ in range(args.reps):
        cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", variant]
        cmd += ["--device", device, "--lengths", ",".join(map(str, lengths))]
        cmd += ["--amp"] if amp else []
        cmd += ["--width", str(args.width), "--batch", str(args.batch)]
        cwd = tempfile.mkdtemp(prefix="det-gpu-overhead-cwd-")  # 0.37 copies the cwd
        done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
        if done.returncode == NOT_INSTALLED:
            return "skipped (not installed)"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return "failed: " + " | ".join(tail)
        times = json.loads(done.stdout.strip().splitlines()[-1])
        version = times.pop("version", None)
        best = {k: min(v, best.get(k, v)) for k, v in times.items()}
    if version:
        print(f"  ({variant}: {version})")
    return (best[str(args.long)] - best[str(args.short)]) / (args.long - args.short)


def main(argv: list[str] | None = None) -> int:
    global WIDTH, BATCH
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--amp", action="store_true", help="(child) train with AMP")
    parser.add_argument("--amp-modes", default="off,on", help="off, on, or off,on")
    parser.add_argument("--short", type=int, default=20)
    parser.add_argument("--long", type=int, default=220)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--det037-path", default=os.environ.get("DET037_PATH"))
    parser.add_argument("--width", type=int, default=WIDTH, help="of the MLP's layers")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--lengths", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    WIDTH, BATCH = args.width, args.batch
    if args.child:
        lengths = [int(n) for n in args.lengths.split(",")]
        print(json.dumps(child(args.child, args.device, args.amp, lengths)))
        return 0
    print(f"device {args.device}; MLP {DEPTH}x{WIDTH}, batch {BATCH}; marginal wall time per "
          f"batch between {args.short} and {args.long} batches, best of {args.reps}")  # fmt: skip
    status = 0
    for mode in args.amp_modes.split(","):
        amp = mode == "on"
        results = {v: measure(v, args.device, amp, args) for v in args.variants.split(",")}
        base = results.get("plain")
        print(f"\nAMP {mode}:")
        for variant, value in results.items():
            if isinstance(value, str):
                print(f"  {variant:9s} {value}")
                status = status or (1 if value.startswith("failed") else 0)
                continue
            ratio = f"{value / base:.3f}x plain" if isinstance(base, float) else ""
            print(f"  {variant:9s} {value * 1e3:8.3f} ms/batch  {ratio}")
    return status


if __name__ == "__main__":
    sys.exit(main())
