"""plasticlab: maintaining plasticity in continual learning.

L2 Init (regenerative regularization) as a drop-in for any PyTorch model, every baseline of
Kumar, Marklund & Van Roy (CoLLAs 2024), the five continual-classification problems, and an
ensemble engine that trains K runs at once.

    from plasticlab import L2Init
    reg = L2Init(model, strength=1e-2)
    loss = task_loss + reg()
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
