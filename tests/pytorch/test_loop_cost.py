"""The training loop's per-batch cost, guarded by counting rather than timing (issue 32 part 2).

benchmarks/overhead.py measures PyTorchTrial + Trainer against a hand-written loop (goal: at
most 1.03x on a tiny MLP); timings on a shared machine are too noisy for a test. What the
loop adds per batch is Python work, and that can be counted exactly: these tests run the same
model, data and optimizer both ways under cProfile, at two lengths, and take the difference per
batch (fixed costs and reporting boundaries cancel; the garbage collector is kept out of the
profiled runs, so what earlier tests left behind is not counted). A change to the loop that
adds calls per batch fails here with the figure; if the addition is worth it, measure it with
``benchmarks/overhead.py --workload mlp`` and raise the budget in the same change.
"""

from __future__ import annotations

import collections
import cProfile
import gc
import pstats
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import determined.pytorch as det_torch
from determined.pytorch import Batch

# Python function calls (and builtins cProfile sees) that the loop may add per batch over the
# plain loop below. Measured: -2 (the loop skips torch's record_function around the
# DataLoader's __next__, ten calls, and adds eight of its own).
CALL_BUDGET = 0
SHORT, LONG = 10, 40  # batches; the reporting period is longer than both


def _data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(
        torch.randn(256, 8, generator=g), torch.randint(0, 4, (256,), generator=g)
    )


def _model() -> nn.Module:
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model


def plain_loop(batches: int) -> None:
    """What benchmarks/overhead.py's baseline does: the loss summed on the device."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(_data(), batch_size=8)
    done, running = 0, torch.zeros(())
    while done < batches:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.detach()
            done += 1
            if done == batches:
                break


class CostTrial(det_torch.PyTorchTrial):
    def __init__(self, context: det_torch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(_model())
        sgd = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.opt = context.wrap_optimizer(sgd)

    def build_training_data_loader(self) -> det_torch.DataLoader:
        # Unshuffled, as the plain loop: the same sampler on both sides (a shuffled
        # det.pytorch.DataLoader samples with fewer calls than torch's RandomSampler).
        return det_torch.DataLoader(_data(), batch_size=8)

    def build_validation_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(torch.utils.data.Subset(_data(), range(8)), batch_size=8)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.cross_entropy(self.model(x), y)}


def trial_loop(batches: int) -> None:
    with det_torch.init() as context:
        trial = CostTrial(context)
        det_torch.Trainer(trial, context).fit(
            max_length=Batch(batches), reporting_period=Batch(1000), checkpoint_policy="none"
        )


def _counts(fn: Callable[[int], None], batches: int) -> collections.Counter[str]:
    # The cyclic garbage collector runs in whichever thread allocates when it triggers, and
    # runs the finalizers of what it frees there: a full collection inside a profiled run
    # counted, as that run's calls, the cleanup of other tests' leftovers in the same process
    # (each urllib3 pool of a dropped requests session drains its LifoQueue: Queue.get,
    # Condition.__enter__, notify, list.pop... per connection), and in a long xdist worker
    # that made the difference per batch +12 off. Collect first, and not during the run.
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    prof = cProfile.Profile()
    try:
        prof.enable()
        fn(batches)
        prof.disable()
    finally:
        if was_enabled:
            gc.enable()
    stats: Any = pstats.Stats(prof)
    return collections.Counter(
        {f"{file}:{line}:{fn}": calls for (file, line, fn), (_, calls, *_) in stats.stats.items()}
    )


def per_batch(fn: Callable[[int], None]) -> collections.Counter[str]:
    """Calls per batch of each function: the difference between two lengths."""
    fn(4)  # first-call costs (imports, lazy initialisation) out of the way
    short, long = _counts(fn, SHORT), _counts(fn, LONG)
    out: collections.Counter[str] = collections.Counter()
    for key in short.keys() | long.keys():
        out[key] = round((long[key] - short[key]) / (LONG - SHORT))
    return out


@pytest.fixture(scope="module")
def counted() -> tuple[collections.Counter[str], collections.Counter[str]]:
    return per_batch(plain_loop), per_batch(trial_loop)


def test_the_loop_adds_at_most_the_budgeted_calls_per_batch(counted: Any) -> None:
    plain, trial = counted
    added = sum(trial.values()) - sum(plain.values())
    changed = {k: trial[k] - plain[k] for k in plain.keys() | trial.keys() if trial[k] != plain[k]}
    top = sorted(changed.items(), key=lambda kv: -abs(kv[1]))[:25]
    assert added <= CALL_BUDGET, (
        f"the training loop now makes {added} more calls per batch than a plain loop (budget "
        f"{CALL_BUDGET}); per-batch differences by function: {top}. Measure the change with "
        "benchmarks/overhead.py --workload mlp before raising CALL_BUDGET"
    )


def _record_function_enters(counts: collections.Counter[str]) -> int:
    return sum(n for key, n in counts.items() if key.endswith(":__enter__") and "profiler" in key)


def test_no_record_function_labels_per_batch_without_a_profiler(counted: Any) -> None:
    """torch labels DataLoader.__next__, Optimizer.step and zero_grad with record_function,
    at several microseconds each even when nothing records; the loop skips the DataLoader's
    (the other two are in the user's train_batch, as in the plain loop)."""
    plain, trial = counted
    assert _record_function_enters(plain) == 3
    assert _record_function_enters(trial) == 2


def test_a_profiler_still_sees_the_dataloader_labels() -> None:
    """Under torch.profiler the loop takes batches through __next__, labels included."""
    with det_torch.init() as context:
        trial = CostTrial(context)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            det_torch.Trainer(trial, context).fit(
                max_length=Batch(3), reporting_period=Batch(1000), checkpoint_policy="none"
            )
    labels = [e.name for e in prof.events() if e.name.startswith("enumerate(DataLoader)")]
    assert len(labels) >= 3  # the three training batches (and the validation loader's)
