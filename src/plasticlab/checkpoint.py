"""Checkpoints at task boundaries, so a long run loses at most one task to a crash.

A checkpoint is one ``torch.save`` of the training state — the method object (which holds the
network and the optimizer, so their sharing survives the round trip), its random generators,
the stream position (the next task: streams are pure functions of seed and task) and every
result so far — written to a temporary file and renamed into place, so a kill while saving
leaves the previous checkpoint intact. A resumed run ends with exactly the results of an
uninterrupted one (tested).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

FORMAT = 1


def fingerprint(config: dict, seeds, member_params) -> str:
    """Identifies what a checkpoint belongs to; a mismatch means it is not this run's."""
    text = json.dumps({"config": config, "seeds": list(seeds), "member_params": member_params},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save(path: str | os.PathLike, state: dict) -> None:
    """Atomically write ``state`` to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format": FORMAT, **state}, tmp)
    os.replace(tmp, path)


def load(path: str | os.PathLike, expected_fingerprint: str, device="cpu") -> dict | None:
    """The checkpoint at ``path`` if there is one for this run, else None.

    A checkpoint of another run (different fingerprint) or format is an error naming the file:
    silently starting over, or continuing someone else's run, would both be wrong.
    """
    path = Path(path)
    if not path.is_file():
        return None
    # weights_only=False: the state holds the method object; checkpoints are our own files.
    state = torch.load(path, map_location=device, weights_only=False)
    if state.get("format") != FORMAT or state.get("fingerprint") != expected_fingerprint:
        raise ValueError(f"checkpoint {path} belongs to another run or plasticlab version; "
                         "delete it to start this run from scratch")
    return state
