"""The paper's protocol on Permuted MNIST with Adam, every random draw during training on the
device: the preset ``main-permuted_mnist-adam`` as a sweep file whose Shrink & Perturb and
Continual Backprop draw with Philox (``draws=philox``), so that with ``--compile`` every method of
its grid takes the compiled step (their default host generators' draws keep those two eager).

    python benchmarks/philox_grid.py grid.toml
    plasticlab sweep grid.toml --device cuda --executor interleaved --compile

Other random numbers than the committed study's (the same distributions): a figure of how fast
the protocol runs with every step compiled, not a study to compare with the committed one.
``benchmarks/gpu.sh`` times it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from plasticlab.experiments.presets import get_preset

STUDY = "main-permuted_mnist-adam"
PHILOX = ("shrink_perturb", "cbp")
"""The grid's methods whose default draws come from host generators."""


def philox_sweep(study: str = STUDY) -> dict:
    """``study``'s preset with ``draws = "philox"`` among the fixed parameters of every method
    of :data:`PHILOX` it trains, and its name marked so."""
    sweep = json.loads(json.dumps(get_preset(study)))  # a deep copy
    params = sweep.setdefault("params", {})
    for method in PHILOX:
        if method in sweep.get("methods", []):
            params.setdefault(method, {})["draws"] = "philox"
    sweep["name"] = f"{study}-philox"
    return sweep


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is a JSON string
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r} here")


def to_toml(sweep: dict, prefix: str = "") -> str:
    """``sweep`` as TOML: its plain values first, then each table (a dict) under its dotted name."""
    lines = [f"{key} = {_value(v)}" for key, v in sweep.items() if not isinstance(v, dict)]
    for key, v in sweep.items():
        if isinstance(v, dict):
            name = f"{prefix}{key}"
            lines += ["", f"[{name}]", to_toml(v, f"{name}.").rstrip("\n")]
    return "\n".join(lines).strip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="the sweep file to write")
    parser.add_argument("--study", default=STUDY)
    args = parser.parse_args()
    Path(args.file).write_text(to_toml(philox_sweep(args.study)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
