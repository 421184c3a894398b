"""Where datasets live on disk.

The data directory is chosen, in order of precedence, by

1. an explicit ``data_dir`` argument (the CLI's ``--data-dir``),
2. the ``PLASTICLAB_DATA`` environment variable,
3. the per-user cache directory, ``platformdirs.user_cache_dir("plasticlab")``
   (e.g. ``~/.cache/plasticlab`` on Linux).

Each dataset has its own sub-directory below it (``mnist/``, ``cifar10/``, ``cifar100/``,
``imagenet32/``); see :mod:`plasticlab.data` for the files each one holds.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ENV_VAR = "PLASTICLAB_DATA"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """Return the data directory as an absolute path.

    ``data_dir`` (``--data-dir``) if given, else ``$PLASTICLAB_DATA``, else
    ``platformdirs.user_cache_dir('plasticlab')``. An empty ``PLASTICLAB_DATA`` counts as
    unset (a common result of ``export PLASTICLAB_DATA=`` in shell scripts). ``~`` is
    expanded. The directory need not exist yet: downloads create it.
    """
    if data_dir is not None and str(data_dir) != "":
        chosen = Path(data_dir)
    elif os.environ.get(ENV_VAR):
        chosen = Path(os.environ[ENV_VAR])
    else:
        chosen = Path(platformdirs.user_cache_dir("plasticlab"))
    # Absolute, so the path recorded in run manifests is meaningful from any directory.
    return chosen.expanduser().resolve()


def dataset_dir(data_dir: str | os.PathLike | None, name: str) -> Path:
    """Return the sub-directory of the data directory that holds dataset ``name``."""
    return resolve_data_dir(data_dir) / name
