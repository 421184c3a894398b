"""plasticlab.integrations.lightning.PlasticityCallback in a real Lightning Trainer (Lightning is in
the ``test`` extra; without it these tests are skipped with that reason), and its example."""

from __future__ import annotations

import builtins
import csv
import importlib
import importlib.util
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

from conftest import REPO

HAVE_LIGHTNING = (importlib.util.find_spec("lightning") is not None
                  or importlib.util.find_spec("pytorch_lightning") is not None)
needs_lightning = pytest.mark.skipif(
    not HAVE_LIGHTNING, reason="PyTorch Lightning is not installed (pip install 'plasticlab[lightning]')")


def test_importing_plasticlab_does_not_import_lightning():
    code = ("import sys, plasticlab, plasticlab.integrations; "
            "assert not any(m.split('.')[0] in ('lightning', 'pytorch_lightning') for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_missing_lightning_is_a_clear_error(monkeypatch):
    real_import = builtins.__import__

    def no_lightning(name, *args, **kwargs):
        if name.split(".")[0] in ("lightning", "pytorch_lightning"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_lightning)
    monkeypatch.delitem(sys.modules, "plasticlab.integrations.lightning", raising=False)
    with pytest.raises(ImportError, match=r"plasticlab\[lightning\]"):
        importlib.import_module("plasticlab.integrations.lightning")


def _trainer(tmp_path, callback, max_steps, **kwargs):
    import lightning.pytorch as pl

    return pl.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, callbacks=[callback],
                      logger=pl.loggers.CSVLogger(tmp_path), enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, **kwargs)


def _module(seed: int = 0, l2_init: bool = False):
    import lightning.pytorch as pl

    from plasticlab import L2Init

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(seed)
            self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
            self.reg = L2Init(self.net, 1e-2) if l2_init else None

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.cross_entropy(self(x), y)
            return loss + self.reg() if self.reg is not None else loss

        # L2 Init's θ₀ in Lightning's checkpoints (docs/methods.md's pattern)
        def on_save_checkpoint(self, checkpoint):
            if self.reg is not None:
                checkpoint["l2_init"] = self.reg.state_dict()

        def on_load_checkpoint(self, checkpoint):
            if self.reg is not None:
                self.reg.load_state_dict(checkpoint["l2_init"])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Tiny()


def _data(n=64, batch=8):
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(n, 6, generator=g), torch.randint(3, (n,), generator=g))
    return torch.utils.data.DataLoader(ds, batch_size=batch)


@pytest.fixture
def quiet_lightning():
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@needs_lightning
def test_callback_measures_every_n_optimizer_steps_and_logs(tmp_path, quiet_lightning):
    from plasticlab.integrations.lightning import PlasticityCallback

    module = _module()
    probe = torch.randn(30, 6)
    callback = PlasticityCallback(probe=probe, every=2, thresholds=None)
    trainer = _trainer(tmp_path, callback, max_steps=6)
    trainer.fit(module, _data())
    history = callback.monitor.history
    assert [row["step"] for row in history] == [2, 4, 6]
    assert history.layers("srank") == ["net.1", "net.3"]
    assert all(row["grad_norm"] > 0 for row in history)  # the last backward's .grad was there
    assert callback.monitor.closed and sum(len(m._forward_hooks) for m in module.modules()) == 0
    metrics_csv = next(tmp_path.rglob("metrics.csv"))
    with metrics_csv.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("plasticity/srank/net.1")]
    assert [int(r["step"]) for r in rows] == [2, 4, 6]
    assert [int(float(r["plasticity/srank/net.1"])) for r in rows] == [row["srank/net.1"] for row in history]


@needs_lightning
def test_callback_takes_the_first_batch_as_probe_and_counts_accumulated_updates(tmp_path, quiet_lightning):
    from plasticlab.integrations.lightning import PlasticityCallback

    callback = PlasticityCallback(every=1, thresholds=None)
    trainer = _trainer(tmp_path, callback, max_steps=3, accumulate_grad_batches=2)
    trainer.fit(_module(), _data())
    assert [row["step"] for row in callback.monitor.history] == [1, 2, 3]  # optimizer steps, not batches
    assert callback.monitor.probe.shape == (8, 6)


@needs_lightning
def test_callback_leaves_training_bit_identical(tmp_path, quiet_lightning):
    from plasticlab.integrations.lightning import PlasticityCallback

    def fit(callbacks):
        import lightning.pytorch as pl

        module = _module()
        trainer = pl.Trainer(max_steps=5, accelerator="cpu", devices=1, callbacks=callbacks, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)
        trainer.fit(module, _data())
        return [p.detach().clone() for p in module.parameters()]

    plain = fit([])
    watched = fit([PlasticityCallback(probe=torch.randn(30, 6), every=1, trainability=2, thresholds=None)])
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))


@pytest.mark.slow
@needs_lightning
def test_lightning_example_runs(data_dir):
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "monitor_lightning.py"), "--data-dir",
                           str(data_dir), "--tasks", "1", "--steps", "40", "--every", "20"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["step", "dead%"]
    assert [line.split()[0] for line in lines[1:]] == ["20", "40"]


@needs_lightning
def test_a_fit_resumed_from_a_checkpoint_measures_from_the_first_runs_theta0_and_probe(tmp_path):
    from plasticlab.integrations.lightning import PlasticityCallback

    def callback():  # its probe: the first batch's inputs
        return PlasticityCallback(every=4, thresholds=None)

    first = callback()
    trainer = _trainer(tmp_path / "first", first, max_steps=-1, max_epochs=1)  # 8 batches
    trainer.fit(_module(), _data())
    trainer.save_checkpoint(tmp_path / "at8.ckpt")
    before = first.monitor.state_dict()
    g = torch.Generator().manual_seed(1)  # other data from here on: the probe must not be its first batch
    later = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.randn(64, 6, generator=g), torch.randint(3, (64,), generator=g)), batch_size=8)
    resumed, module = callback(), _module()
    _trainer(tmp_path / "second", resumed, max_steps=16).fit(module, later, ckpt_path=tmp_path / "at8.ckpt")

    history = resumed.monitor.history
    assert [row["step"] for row in history] == [4, 8, 12, 16]
    assert history.state_dict()[:2] == before["history"]
    assert torch.equal(resumed.monitor.probe, first.monitor.probe)
    theta0 = before["baseline"]["initial"]  # the weights before the first run's first update
    assert all(torch.equal(a, b) for a, b in zip(resumed.monitor.state_dict()["baseline"]["initial"],
                                                 theta0, strict=True))
    theta = [p.detach() for p in module.parameters()]
    drift = (sum((a - b).pow(2).sum() for a, b in zip(theta, theta0, strict=True)).sqrt()
             / sum(b.pow(2).sum() for b in theta0).sqrt())
    assert history[-1]["weight_drift"] == pytest.approx(float(drift), rel=1e-6)


@needs_lightning
def test_l2_init_in_a_lightning_module_resumes_with_the_first_runs_theta0(tmp_path, quiet_lightning):
    import lightning.pytorch as pl

    first = _module(l2_init=True)
    theta0 = [t.clone() for t in first.reg.initial]
    trainer = _trainer(tmp_path / "first", pl.Callback(), max_steps=-1, max_epochs=1)
    trainer.fit(first, _data())
    trainer.save_checkpoint(tmp_path / "at8.ckpt")
    resumed = _module(seed=1, l2_init=True)  # built on another initialisation, as a new process may
    assert not torch.equal(resumed.reg.initial[0], theta0[0])
    second = _trainer(tmp_path / "second", pl.Callback(), max_steps=12)
    second.fit(resumed, _data(), ckpt_path=tmp_path / "at8.ckpt")
    assert all(torch.equal(a, b) for a, b in zip(resumed.reg.initial, theta0, strict=True))
