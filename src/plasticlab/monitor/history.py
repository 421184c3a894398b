"""The history of a :class:`plasticlab.Monitor`: every measured row, and the tidy table
(one row per step, layer and metric) as records, CSV or pandas."""

from __future__ import annotations

import csv
from pathlib import Path

OVERALL = "all"
"""The ``layer`` of whole-network values in the tidy table."""


def split_key(key: str) -> tuple[str, str]:
    """(metric, layer) of a key of a measured row: ``"srank/3"`` → ``("srank", "3")``;
    a whole-network value's layer is :data:`OVERALL`."""
    metric, _, layer = key.partition("/")
    return metric, layer or OVERALL


class MonitorHistory:
    """Every measurement of a :class:`Monitor`, one dict per measured step (as :meth:`Monitor.step`
    returned it), with a tidy long table: one row per (step, layer, metric) — ``layer`` is
    ``"all"`` for whole-network values."""

    COLUMNS = ("step", "layer", "metric", "value")

    def __init__(self):
        self.steps: list[dict] = []

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)

    def __getitem__(self, i):
        return self.steps[i]

    def append(self, row: dict) -> None:
        self.steps.append(row)

    def state_dict(self) -> list[dict]:
        """The measured rows (copies: plain numbers and strings)."""
        return [dict(row) for row in self.steps]

    def load_state_dict(self, rows: list[dict]) -> None:
        """Put :meth:`state_dict`'s rows back, in place of these."""
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "step" in r for r in rows):
            raise ValueError("Monitor.load_state_dict: history must be the list of measured rows "
                             "(dicts with a 'step') that Monitor.state_dict() gives")
        self.steps = [dict(row) for row in rows]

    def rows(self) -> list[dict]:
        """The tidy table as a list of ``{"step", "layer", "metric", "value"}`` dicts."""
        out = []
        for row in self.steps:
            for key, value in row.items():
                if key == "step":
                    continue
                metric, layer = split_key(key)
                out.append({"step": row["step"], "layer": layer, "metric": metric, "value": value})
        return out

    def series(self, metric: str, layer: str = OVERALL) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric of one layer (``"all"``: the whole network), for plots."""
        key = metric if layer == OVERALL else f"{metric}/{layer}"
        pairs = [(row["step"], row[key]) for row in self.steps if key in row]
        return [s for s, _ in pairs], [v for _, v in pairs]

    def layers(self, metric: str) -> list[str]:
        """The layers that have ``metric``, in the order they were first measured."""
        seen: dict[str, None] = {}
        for row in self.steps:
            for key in row:
                m, layer = split_key(key)
                if m == metric and layer != OVERALL:
                    seen.setdefault(layer)
        return list(seen)

    def to_pandas(self, wide: bool = False):
        """The tidy table as a ``pandas.DataFrame`` (``wide=True``: one row per step, one
        column per ``metric/layer`` key, as the dicts are)."""
        try:
            import pandas as pd
        except ImportError:
            raise RuntimeError("MonitorHistory.to_pandas needs pandas: pip install pandas") from None
        if wide:
            return pd.DataFrame(self.steps)
        return pd.DataFrame(self.rows(), columns=list(self.COLUMNS))

    def to_csv(self, path: str | Path, wide: bool = False) -> Path:
        """Write the tidy table (or, ``wide=True``, one row per step) to ``path`` as CSV."""
        path = Path(path)
        with path.open("w", newline="") as fh:
            if wide:
                keys: dict[str, None] = {}
                for row in self.steps:
                    keys.update(dict.fromkeys(row))
                writer = csv.DictWriter(fh, fieldnames=list(keys))
                writer.writeheader()
                writer.writerows(self.steps)
            else:
                writer = csv.DictWriter(fh, fieldnames=list(self.COLUMNS))
                writer.writeheader()
                writer.writerows(self.rows())
        return path
