"""plasticlab: maintaining plasticity in continual learning.

L2 Init (regenerative regularization) as a drop-in for any PyTorch model, every baseline of
Kumar, Marklund & Van Roy (CoLLAs 2024), the five continual-classification problems, and an
ensemble engine that trains K runs at once.

    from plasticlab import L2Init
    reg = L2Init(model, strength=1e-2)
    loss = task_loss + reg()

The package's layers, lowest first; a module imports only from its own layer or below, and no
modules import one another in a circle (``tests/test_layers.py`` checks both). A module is in
its top-level module's layer:

0. ``params``, ``rng``, ``philox``, ``device``, ``run_config``, ``checkpoint``, ``state``,
   ``fisher``, ``fast``, ``loggers``, ``registry`` — typed parameters, seeded streams and a
   counter-based generator drawn on the device, devices, the resolved run configuration and an
   ensemble's members, safe checkpoints, the drop-ins' saved state, the Fisher information, the
   switch to the fast paths' plain forms, the TensorBoard/W&B mirrors, the registries of methods
   and problems that other packages add to;
1. ``data`` — datasets in their official formats, checked;
2. ``problems`` — the continual streams (SPEC §3) for K seeded members, and a task's examples
   gathered and prepared ahead;
3. ``nets`` — ensemble layers and their kernels, the MLP and CNN, and their units;
4. ``metrics``, ``regularizers``, ``rank_order``, ``foreach_penalty``, ``perturb``, ``optim`` —
   measurements of a network, the drop-in penalties (Wasserstein Init's sort from the last
   order, a penalty as one node of foreach kernels) and Shrink & Perturb, optimizers
   with per-element state;
5. ``methods``, ``measure`` — one file per plasticity method; the measurements of an
   ensemble at a task end;
6. ``step`` — one training step, written once: task gradient → the method's gradient
   transforms → the update → the method's hooks, eager or compiled;
7. ``engine`` — the training loop over an ensemble;
8. ``monitor``, ``dropin_field``, ``member_independence`` — the drop-ins for anyone's model
   and what the engine guarantees;
9. ``experiments`` — configs, presets, sweeps, the protocol, the results store, executors;
10. ``report``, ``integrations`` — figures, tables and pages; framework callbacks;
11. ``cli``, ``demo``, ``__main__`` — the ``plasticlab`` command (``python -m plasticlab``).
"""

from importlib import metadata as _metadata

from .dropin_field import SNR, SWR, UPGD, HareTortoise, NormalizeProject, Parseval, Spectral, WeightClip
from .monitor import Monitor
from .perturb import ShrinkPerturb
from .regularizers import EWC, L2, HuberInit, L1Init, L2Init, L2InitResample, Regularizer, WassersteinInit

try:
    __version__ = _metadata.version("plasticlab")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["EWC", "HuberInit", "L1Init", "L2", "L2Init", "L2InitResample", "Monitor", "Regularizer",
           "ShrinkPerturb", "__version__", "HareTortoise", "Parseval", "SNR", "SWR", "UPGD",
           "NormalizeProject", "Spectral", "WassersteinInit", "WeightClip"]
