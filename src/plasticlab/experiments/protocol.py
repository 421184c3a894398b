"""The paper's selection protocol (SPEC §6).

For each problem × optimizer × method: run the grid on 3 seeds, pick the configuration with the
highest total average online accuracy (mean over those seeds), then run the winner on 10 new
seeds and report mean and a 95 % interval across them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable


def config_key(config: dict) -> str:
    """A canonical text key of a config (without seed), for grouping runs by configuration."""
    return json.dumps({k: v for k, v in config.items() if k != "seed"}, sort_keys=True)


def select_best(runs: Iterable[dict]) -> dict[tuple[str, str, str], dict]:
    """The best configuration per (problem, optimizer, method).

    ``runs`` are finished run rows (``config`` and ``summary['total_online_accuracy']``, as
    :meth:`ResultStore.runs` returns them). Returns, per group, ``config`` (the winning config),
    ``score`` (its mean over seeds), ``seeds`` (how many runs it averaged) and ``candidates``
    (how many configurations competed). Ties go to the configuration seen first.
    """
    by_config: dict[str, dict] = {}
    for run in runs:
        cfg = run["config"]
        acc = (run.get("summary") or {}).get("total_online_accuracy")
        if acc is None:
            continue
        entry = by_config.setdefault(config_key(cfg), {"config": cfg, "scores": []})
        entry["scores"].append(float(acc))
    best: dict[tuple[str, str, str], dict] = {}
    counts: dict[tuple[str, str, str], int] = {}
    for entry in by_config.values():
        cfg = entry["config"]
        group = (cfg["problem"], cfg["optimizer"], cfg["method"])
        counts[group] = counts.get(group, 0) + 1
        score = sum(entry["scores"]) / len(entry["scores"])
        if group not in best or score > best[group]["score"]:
            best[group] = {"config": cfg, "score": score, "seeds": len(entry["scores"])}
    for group, entry in best.items():
        entry["candidates"] = counts[group]
    return best
