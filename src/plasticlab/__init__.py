"""plasticlab: maintaining plasticity in continual learning.

L2 Init (regenerative regularization) as a drop-in for any PyTorch model, every baseline of
Kumar, Marklund & Van Roy (CoLLAs 2024), the five continual-classification problems, and an
ensemble engine that trains K runs at once.

    from plasticlab import L2Init
    reg = L2Init(model, strength=1e-2)
    loss = task_loss + reg()

The package's layers, lowest first; a module imports only from its own layer or below
(``tests/test_layers.py`` checks it). A module is in its top-level module's layer unless it is
listed with its own (``fast``'s):

0. ``params``, ``rng``, ``device``, ``run_config``, ``checkpoint``, ``fisher``, ``fast``,
   ``loggers`` — typed parameters, seeded streams, devices, the resolved run configuration, safe
   checkpoints, the Fisher information; the fast paths that read tensors alone (the layers'
   kernels, a task's examples gathered) and the switch to their plain forms, so the layers above
   can call them; the optional TensorBoard and W&B mirrors, shared by runs and the Monitor;
1. ``data`` — datasets in their official formats, checked;
2. ``problems`` — the continual streams (SPEC §3) for K seeded members;
3. ``nets`` — ensemble layers, the MLP and CNN, and their units;
4. ``metrics``, ``regularizers``, ``perturb``, ``optim`` — measurements of a network, the
   drop-in penalties and Shrink & Perturb, optimizers with per-element state;
5. ``fast.quadratic_penalty``, ``fast.mlp_backprop``, ``fast.folded_permutation`` — the fast
   paths that read the regularizers, networks and problems below; every fast path is tested
   against its plain form;
6. ``methods``, ``measure`` — one file per plasticity method; the measurements of an
   ensemble at a task end;
7. ``fast.compiled_step`` — the whole training step of a penalty method under
   ``torch.compile``, which reads the methods and optimizers below;
8. ``engine`` — the training loop over an ensemble;
9. ``monitor``, ``dropin_field``, ``member_independence`` — the drop-ins for anyone's model
   and what the engine guarantees;
10. ``experiments`` — configs, presets, sweeps, the protocol, the results store, executors;
11. ``report``, ``integrations`` — figures, tables and pages; framework callbacks;
12. ``cli``, ``demo`` — the ``plasticlab`` command.
"""

from importlib.metadata import PackageNotFoundError, version

from .dropin_field import SNR, SWR, UPGD, HareTortoise, Parseval
from .monitor import Monitor
from .perturb import ShrinkPerturb
from .regularizers import EWC, L2, HuberInit, L1Init, L2Init, L2InitResample, Regularizer

try:
    __version__ = version("plasticlab")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["EWC", "HuberInit", "L1Init", "L2", "L2Init", "L2InitResample", "Monitor", "Regularizer",
           "ShrinkPerturb", "__version__", "HareTortoise", "Parseval", "SNR", "SWR", "UPGD"]
