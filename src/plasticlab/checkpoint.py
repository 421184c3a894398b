"""Checkpoints at task boundaries and between steps, so a crash or a stop loses little.

A checkpoint holds the training state — the network's parameters, the optimizer's state, the
method's own state (tensors, arrays, counters, random generators: :func:`capture`), the
stream position (the next task, and the step of it reached when it was saved between two steps:
streams are pure functions of seed, task and step) and every result so far. A resumed run ends
with exactly the results of an uninterrupted one (tested). :class:`CheckpointWriter` writes the
file in a background thread from a copy of the state.

**A checkpoint loads no code.** The file is a text header and a payload::

    PLASTICLAB-CHECKPOINT\\n
    {"format": 3, "fingerprint": …, "payload_bytes": …, "payload_sha256": …, …}\\n
    <torch.save of plain containers, numbers, strings and tensors>

The header is read and checked first — the magic line, the format, the fingerprint of the run
it belongs to and the payload's SHA-256 — without unpickling anything; only then is the
payload read, with ``torch.load(weights_only=True)``, which refuses any object that is not a
tensor or a plain container. A crafted or foreign file is refused with an error naming it.

Files are written to a temporary name and renamed into place, so a kill while saving leaves
the previous checkpoint intact.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import pickle
import threading
import types
from pathlib import Path

import numpy as np
import torch
from torch import nn

FORMAT = 3
READS = (2, 3)  # 3: a task may be in flight (saved between two of its steps)
MAGIC = b"PLASTICLAB-CHECKPOINT\n"
_HEADER_LIMIT = 1 << 16  # a header is a few hundred bytes; anything longer is not ours


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message names the file and what to do."""


def fingerprint(key: dict) -> str:
    """Identifies what a checkpoint belongs to, from the JSON-able ``key`` of its run (an
    ensemble's: :meth:`plasticlab.run_config.Members.fingerprint`); a mismatch means it is not
    this run's."""
    text = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save(path: str | os.PathLike, fingerprint: str, state: dict) -> None:
    """Atomically write ``state`` (tensors, plain containers, numbers, strings) to ``path``
    as the checkpoint of the run ``fingerprint``."""
    write(path, fingerprint, state, serialize(state))


def serialize(state: dict) -> bytes:
    """The payload of a checkpoint of ``state``: a copy of its values as they are now."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def write(path: str | os.PathLike, fingerprint: str, state: dict, payload: bytes) -> None:
    """Atomically write the checkpoint ``payload`` (:func:`serialize` of ``state``, whose plain
    values go into the header too) of the run ``fingerprint`` to ``path``: a temporary file,
    synced, then renamed into place, so a kill while writing leaves the previous checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flight = state.get("in_flight")
    header = {"format": FORMAT, "fingerprint": fingerprint, "payload_bytes": len(payload),
              "payload_sha256": hashlib.sha256(payload).hexdigest(),
              # readable without loading the payload (plasticlab status; a resume's note on
              # tasks that other code trained)
              "next_task": state.get("next_task"), "wall": state.get("wall"),
              "sittings": state.get("sittings"), "sitting_start": state.get("sitting_start"),
              "steps_in_task": flight["step"] if flight else 0}
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(MAGIC + json.dumps(header).encode() + b"\n")
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CheckpointWriter:
    """Saves checkpoints with the file written in a background thread: :meth:`save` copies the
    state at once (:func:`serialize`, so training may go on changing it) and returns while the
    file is written; one write at a time, in order. An error of a write is raised by the next
    :meth:`save` or by :meth:`wait`."""

    def __init__(self):
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, path: str | os.PathLike, fingerprint: str, state: dict) -> None:
        """Copy ``state`` now and write it to ``path`` in the background (after the write
        before it)."""
        payload = serialize(state)
        self.wait()
        self._thread = threading.Thread(target=self._write, args=(path, fingerprint, state, payload),
                                        name="plasticlab-checkpoint", daemon=True)
        self._thread.start()

    def _write(self, path, fingerprint, state, payload) -> None:
        try:
            write(path, fingerprint, state, payload)
        except BaseException as exc:  # handed to the training thread at its next save or wait
            self._error = exc

    def wait(self) -> None:
        """Return once the last write is on disk; raise its error if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error


def steps_done(header: dict, steps_per_task: int) -> int:
    """The steps of its run a checkpoint with ``header`` has trained: its tasks done, each of
    ``steps_per_task`` steps, and the steps of the task in flight."""
    return (header.get("next_task") or 0) * steps_per_task + (header.get("steps_in_task") or 0)


def saved_steps(path, steps_per_task: int) -> int | None:
    """The steps of its run the checkpoint at ``path`` has trained (:func:`steps_done` of its
    header): what a resumed sweep does not train again. None where there is no file; 0 where it
    cannot be read — the sweep names it as it starts, and trains that ensemble from the first
    task. The planner, the dry run's estimate and the sweep's progress all count from here."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return steps_done(read_header(path), steps_per_task)
    except (CheckpointError, OSError):
        return 0


def position(header: dict) -> str:
    """Where the checkpoint with ``header`` resumes: ``"task T"`` at a task end, ``"step S of
    task T"`` between two steps."""
    task, step = header.get("next_task", 0), header.get("steps_in_task") or 0
    return f"step {step} of task {task}" if step else f"task {task}"


def _advice(path: Path) -> str:
    return f"delete {path} to restart its run(s) from the first task"


def read_header(path: str | os.PathLike) -> dict:
    """The header of the checkpoint at ``path``, checked (magic, format, payload size)
    without reading the payload; :class:`CheckpointError` naming the file otherwise."""
    path = Path(path)
    with open(path, "rb") as f:
        magic = f.read(len(MAGIC))
        line = f.readline(_HEADER_LIMIT)
        offset = f.tell()
    if magic != MAGIC:
        raise CheckpointError(f"checkpoint {path} is not a plasticlab checkpoint of this version "
                              f"(an older format, or another file); nothing in it was loaded: "
                              f"{_advice(path)}")
    try:
        header = json.loads(line)
        if not isinstance(header, dict):
            raise ValueError
    except ValueError:
        raise CheckpointError(f"checkpoint {path} has a corrupt header; nothing in it was loaded: "
                              f"{_advice(path)}") from None
    if header.get("format") not in READS:
        raise CheckpointError(f"checkpoint {path} has format {header.get('format')!r}, this "
                              f"plasticlab reads formats {', '.join(map(str, READS))}: {_advice(path)}")
    size = path.stat().st_size - offset
    if size != header.get("payload_bytes"):
        raise CheckpointError(f"checkpoint {path} is truncated or corrupt ({size} of "
                              f"{header.get('payload_bytes')} payload bytes): {_advice(path)}")
    header["offset"] = offset
    return header


def load(path: str | os.PathLike, expected_fingerprint: str, device="cpu") -> dict | None:
    """The state saved at ``path`` if there is a checkpoint there, else None.

    Checked before anything is unpickled: the header, the fingerprint (a checkpoint of another
    run is an error: silently starting over, or continuing someone else's run, would both be
    wrong) and the payload's SHA-256. The payload is then read with ``weights_only=True``.
    Tensors are loaded on the CPU (generator states must stay there); ``device`` is accepted
    for the callers' symmetry. Every failure is a :class:`CheckpointError` naming the file.
    """
    path = Path(path)
    if not path.is_file():
        return None
    header = read_header(path)
    if header.get("fingerprint") != expected_fingerprint:
        raise CheckpointError(f"checkpoint {path} belongs to another run (other config, seeds, "
                              f"or members' parameters, step sizes or methods): {_advice(path)}")
    with open(path, "rb") as f:
        f.seek(header["offset"])
        payload = f.read()
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise CheckpointError(f"checkpoint {path} is corrupt (its payload does not match the "
                              f"checksum in its header): {_advice(path)}")
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"checkpoint {path} holds something other than tensors and plain "
                              f"values and was refused (nothing in it was run: {first}): "
                              f"{_advice(path)}") from None


# --- the training state ---------------------------------------------------------------------


def training_state(net: nn.Module, optimizer, method) -> dict:
    """The network's, optimizer's and method's state as tensors and plain values."""
    return {"net": net.state_dict(), "optimizer": optimizer.state_dict(),
            "method": method.state_dict()}


def restore_training(state: dict, net: nn.Module, optimizer, method) -> None:
    """Put :func:`training_state`'s output back into a freshly built network, optimizer and
    method (built from the same config and seeds), in place."""
    net.load_state_dict(state["net"])
    device = next(net.parameters()).device
    optimizer.load_state_dict(nested_to_device(state["optimizer"], device))
    method.load_state_dict(state["method"])


def nested_to_device(value, device):
    """Every tensor of a nested list/tuple/dict moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: nested_to_device(v, device) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(nested_to_device(v, device) for v in value)
    return value


# --- an object's state, generically ----------------------------------------------------------
#
# capture() walks an object's attributes (and their attributes, lists, dicts, functools.partial
# arguments) and encodes every piece of state it finds — tensors, numpy arrays and scalars,
# Python numbers and strings, random generators — as tensors and plain containers. restore()
# walks a freshly built object of the same construction in parallel and writes the values back
# IN PLACE wherever the fresh object already holds a tensor, array or generator of that shape,
# so references shared between objects (a regularizer's view of the network's weights, a
# sampler's generators) stay shared. Anything excluded (the network and the optimizer, which
# are saved by their own state_dict; callables; constants like devices; the attributes a class
# names in its ``derived_state``, rebuilt from the rest) is left as built.

_KIND = "__kind__"
RETIRED = ("PenaltyGradient", "QuadraticGradient")
"""Types an earlier version kept in a method's state that hold no training state now: a
penalty's gradient helper (its θ − target buffer is rewritten at every step). A checkpoint that
holds one restores without it."""
_SCALARS = (bool, int, float, str, type(None))
_CONSTANTS = (torch.device, torch.dtype, type, np.dtype)
_FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.BuiltinMethodType)


class Excluded:
    """What :func:`capture` leaves out: objects (by identity) and tensors sharing storage with
    ``tensors`` (views of the network's parameters, which the network's own state holds)."""

    def __init__(self, objects=(), tensors=()):
        self.ids = {id(o) for o in objects}
        self.storages = {t.untyped_storage().data_ptr() for t in tensors}

    def __contains__(self, value) -> bool:
        if id(value) in self.ids:
            return True
        return isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() in self.storages


def capture(value, excluded: Excluded, where: str = "state", _seen: set | None = None):
    """``value``'s state as tensors and plain containers (see the comment above)."""
    seen = set() if _seen is None else _seen
    if value in excluded or isinstance(value, _CONSTANTS) or id(value) in seen:
        return {_KIND: "skip"}
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, torch.Tensor):
        seen.add(id(value))
        return value.detach().clone()
    if isinstance(value, torch.Generator):
        return {_KIND: "generator", "state": value.get_state()}
    if isinstance(value, np.ndarray):
        return {_KIND: "ndarray", "dtype": value.dtype.str, "shape": list(value.shape),
                "data": torch.frombuffer(bytearray(np.ascontiguousarray(value).tobytes()),
                                         dtype=torch.uint8) if value.size else torch.zeros(0)}
    if isinstance(value, np.generic):
        return {_KIND: "npscalar", "dtype": value.dtype.str, "value": value.item()}
    seen.add(id(value))
    if isinstance(value, list | tuple):
        return {_KIND: type(value).__name__,
                "items": [capture(v, excluded, f"{where}[{i}]", seen) for i, v in enumerate(value)]}
    if isinstance(value, dict):
        if not all(isinstance(k, str | int) for k in value):
            raise TypeError(f"cannot checkpoint {where}: a dict with keys other than str or int")
        return {_KIND: "dict", "keys": list(value),
                "values": [capture(v, excluded, f"{where}[{k!r}]", seen) for k, v in value.items()]}
    if isinstance(value, functools.partial):
        # A sampler's generators may live only inside its partial: their state is state.
        return {_KIND: "partial", "args": capture(list(value.args), excluded, f"{where}.args", seen),
                "keywords": capture(dict(value.keywords), excluded, f"{where}.keywords", seen)}
    if isinstance(value, (nn.Module, *_FUNCTIONS)):
        return {_KIND: "skip"}  # the network is saved whole; functions hold no training state
    attrs = getattr(value, "__dict__", None)
    if attrs is None:
        raise TypeError(f"cannot checkpoint {where} of type {type(value).__name__}: give its owner "
                        "a state_dict()/load_state_dict()")
    derived = getattr(type(value), "derived_state", ())  # rebuilt from the rest: not state
    return {_KIND: "object", "type": type(value).__qualname__,
            "attrs": {k: capture(v, excluded, f"{where}.{k}", seen) for k, v in attrs.items()
                      if k not in derived}}


def _retired(saved) -> bool:
    """Whether ``saved`` is an object of a :data:`RETIRED` type."""
    return isinstance(saved, dict) and saved.get(_KIND) == "object" and saved["type"] in RETIRED


def restore(current, saved, device, where: str = "state"):
    """Write ``saved`` (:func:`capture`'s output) into ``current`` in place where it can; the
    value the slot holding ``current`` should hold afterwards."""
    if isinstance(saved, torch.Tensor):
        if (isinstance(current, torch.Tensor) and current.shape == saved.shape
                and current.dtype == saved.dtype):
            with torch.no_grad():
                current.copy_(saved)
            return current
        return saved.to(current.device if isinstance(current, torch.Tensor) else device)
    if not isinstance(saved, dict) or _KIND not in saved:
        return saved
    kind = saved[_KIND]
    if kind == "skip":
        return current
    if kind == "generator":
        if not isinstance(current, torch.Generator):
            raise TypeError(f"checkpoint has a generator at {where}, the method has none there")
        current.set_state(saved["state"])
        return current
    if kind == "ndarray":
        array = np.frombuffer(saved["data"].numpy().tobytes(), dtype=np.dtype(saved["dtype"]))
        array = array.reshape(saved["shape"]).copy()
        if isinstance(current, np.ndarray) and current.shape == array.shape and current.dtype == array.dtype:
            current[...] = array
            return current
        return array
    if kind == "npscalar":
        return np.dtype(saved["dtype"]).type(saved["value"])
    if kind in ("list", "tuple"):
        items = saved["items"]
        old = list(current) if isinstance(current, list | tuple) and len(current) == len(items) \
            else [None] * len(items)
        new = [restore(c, s, device, f"{where}[{i}]")
               for i, (c, s) in enumerate(zip(old, items, strict=True))]
        if isinstance(current, list) and len(current) == len(items):
            current[:] = new
            return current
        return new if kind == "list" else tuple(new)
    if kind == "dict":
        target = current if isinstance(current, dict) else {}
        for k, s in zip(saved["keys"], saved["values"], strict=True):
            if not (k not in target and _retired(s)):
                target[k] = restore(target.get(k), s, device, f"{where}[{k!r}]")
        return target
    if kind == "partial":
        if isinstance(current, functools.partial):
            restore(list(current.args), saved["args"], device, f"{where}.args")
            restore(dict(current.keywords), saved["keywords"], device, f"{where}.keywords")
        return current
    if kind == "object":
        if current is None or type(current).__qualname__ != saved["type"]:
            raise TypeError(f"checkpoint has a {saved['type']} at {where}, the method has "
                            f"{type(current).__name__}: was it saved by another version of the method?")
        for name, s in saved["attrs"].items():
            if not (not hasattr(current, name) and _retired(s)):
                setattr(current, name, restore(getattr(current, name, None), s, device, f"{where}.{name}"))
        return current
    raise TypeError(f"unknown entry {kind!r} at {where} of a checkpoint")
