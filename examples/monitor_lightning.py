"""``plasticlab.Monitor`` in a PyTorch Lightning run: ``PlasticityCallback``.

The MLP of ``monitor_any_model.py`` as a LightningModule learns Permuted MNIST streamed from
``plasticlab.problems``; the callback measures it every ``--every`` optimizer steps and sends
the measurements to the trainer's loggers (here Lightning's CSVLogger). The lines it asks for::

    from plasticlab.integrations.lightning import PlasticityCallback
    callback = PlasticityCallback(probe=inputs, every=100)
    trainer = lightning.Trainer(callbacks=[callback], ...)

Needs Lightning: ``pip install 'plasticlab[lightning]'``.

Run:  python examples/monitor_lightning.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import warnings

import lightning.pytorch as pl
import torch
from torch import nn

from plasticlab import L2Init
from plasticlab.integrations.lightning import PlasticityCallback
from plasticlab.problems import PermutedMNIST


class Classifier(pl.LightningModule):
    def __init__(self, l2_init: float = 0.0):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                                 nn.Linear(100, 10))
        # built here, beside the CPU weights: it follows them to the GPU the trainer moves them to
        self.reg = L2Init(self.net, strength=l2_init) if l2_init > 0 else None

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        return loss + self.reg() if self.reg is not None else loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    # θ₀ is L2 Init's state: into Lightning's checkpoints with the weights, so that
    # `trainer.fit(..., ckpt_path=...)` pulls toward the first run's θ₀, not this module's
    def on_save_checkpoint(self, checkpoint):
        if self.reg is not None:
            checkpoint["l2_init"] = self.reg.state_dict()

    def on_load_checkpoint(self, checkpoint):
        if self.reg is not None:
            self.reg.load_state_dict(checkpoint["l2_init"])


class Stream(torch.utils.data.IterableDataset):
    """The stream's batches in order, task after task (one member: seed 0)."""

    def __init__(self, stream: PermutedMNIST):
        self.stream = stream

    def __iter__(self):
        for task in range(self.stream.tasks):
            self.stream.start_task(task)
            for step in range(self.stream.steps_per_task):
                x, y = self.stream.batch(step)
                yield x[0], y[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default $PLASTICLAB_DATA)")
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=625)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--l2-init", type=float, default=0.0, help="L2 Init's λ (0: plain Adam)")
    parser.add_argument("--accelerator", default="cpu", help="Lightning's: cpu, gpu or auto")
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")  # Lightning's own use of a torch API

    stream = PermutedMNIST([0], tasks=args.tasks, steps_per_task=args.steps, data_dir=args.data_dir)
    stream.start_task(0)
    probe = stream.sample_inputs(500, "probe")[0]  # 500 inputs of the first task
    callback = PlasticityCallback(probe=probe, every=args.every)
    with tempfile.TemporaryDirectory() as logs:
        trainer = pl.Trainer(max_epochs=1, accelerator=args.accelerator, devices=1, callbacks=[callback],
                             logger=pl.loggers.CSVLogger(logs), enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Classifier(args.l2_init), torch.utils.data.DataLoader(Stream(stream), batch_size=None))
    history = callback.monitor.history
    layers = history.layers("srank")
    print("step  dead%  " + "  ".join(f"srank[{layer}]" for layer in layers) + "  grad_norm")
    for row in history:
        print(f"{row['step']:4d}  {100 * row['dead_fraction']:5.1f}  "
              + "  ".join(f"{row[f'srank/{layer}']:{len(layer) + 7}d}" for layer in layers)
              + f"  {row['grad_norm']:9.3f}")


if __name__ == "__main__":
    main()
