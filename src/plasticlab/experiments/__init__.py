"""Experiments: configs from user input, presets, sweeps and the paper's protocol, executors,
the results store and run manifests."""

from .config import RunConfig, apply_setting, parse_seeds, resolve_config
from .manifest import build_manifest
from .store import ResultStore

__all__ = ["ResultStore", "RunConfig", "apply_setting", "build_manifest", "parse_seeds",
           "resolve_config"]
