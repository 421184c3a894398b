"""Moved to :mod:`plasticlab.loggers` (the lowest layer, so that :class:`plasticlab.Monitor`'s
mirrors can use it too).

This name stays only for ``plasticlab.cli`` and ``plasticlab.cli_sweep``, whose imports of
``make_loggers`` are being moved with the command's own restructuring; delete it once they
import :mod:`plasticlab.loggers`.
"""

from ..loggers import TensorBoardLogger, WandbLogger, make_loggers

__all__ = ["TensorBoardLogger", "WandbLogger", "make_loggers"]
