"""``model_def.py`` of the PyTorchTrial experiments the master runs in tests/master
(test_pytorch_trials.py, test_pytorch_038.py): a linear regression trained with SGD.
``SLOW_MODEL_DEF`` sleeps ``hparams["sleep"]`` seconds per batch and uses momentum (state that a
resumed run must restore)."""

from __future__ import annotations

MODEL_DEF = """
import torch
from torch import nn

from determined import pytorch


class RegressionTrial(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.context = context
        torch.manual_seed(0)
        self.model = context.wrap_model(nn.Linear(4, 1))
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"))
        )
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(64, 4, generator=g)
        self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])

    def _loader(self):
        ds = torch.utils.data.TensorDataset(self.x, self.y)
        return pytorch.DataLoader(ds, batch_size=self.context.get_per_slot_batch_size())

    def build_training_data_loader(self):
        return self._loader()

    def build_validation_data_loader(self):
        return self._loader()

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}
"""


SLOW_MODEL_DEF = (
    MODEL_DEF.replace("import torch\n", "import time\nimport torch\n", 1)
    .replace(
        "        x, y = batch\n        loss = nn",
        "        time.sleep(self.context.get_hparam('sleep'))\n"
        "        x, y = batch\n        loss = nn",
        1,
    )
    .replace(
        'torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"))',
        'torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"), momentum=0.9)',
        1,
    )
)
