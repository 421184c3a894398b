"""Saving and loading a drop-in's state, so that a training loop that uses one can be resumed.

A drop-in (:class:`plasticlab.L2Init`, :class:`~plasticlab.EWC`, :class:`~plasticlab.SNR`, …)
holds state that its constructor cannot rebuild: θ₀, taken when it was built; EWC's anchors and
Fisher sums; the steps counted toward a period; the random generators' positions. Built again
on resumed weights, an :class:`~plasticlab.L2Init` would pull toward the trained weights instead
of the initial ones — a wrong run that raises no error. So each drop-in has ``state_dict()`` and
``load_state_dict()``, as ``torch.optim`` optimizers do::

    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "reg": reg.state_dict()}, path)
    ...                                     # later, another process
    model, optimizer, reg = build()         # as before: the model, its optimizer, the drop-in
    saved = torch.load(path, weights_only=True)
    model.load_state_dict(saved["model"]); optimizer.load_state_dict(saved["optimizer"])
    reg.load_state_dict(saved["reg"])

:class:`NamedState` gives a class the two methods over the attributes it names in
``state_attributes``. The state is readable — a list of tensors stays a list of tensors, a
generator is its state (a ``uint8`` tensor), a module its ``state_dict()`` — and holds tensors
and plain values only, so ``torch.load(..., weights_only=True)`` reads it. Hyper-parameters are
not state: they come from the constructor. Loading is strict: a missing or unknown key, a list
of another length, a tensor of another shape is a ``ValueError`` naming the drop-in and the
entry, raised before anything is written; tensors are
copied in place, onto the device and into the dtype of the drop-in's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .checkpoint import Excluded, capture, nested_to_device, restore

_SCALARS = (bool, int, float, str)


class NamedState:
    """``state_dict()``/``load_state_dict()`` over the attributes named in ``state_attributes``
    (tensors, generators, modules, numbers, None, and lists of them)."""

    state_attributes: tuple[str, ...] = ()

    def state_dict(self) -> dict:
        """This drop-in's state — what training changed or what was taken when it was built —
        as tensors and plain values (copies), ``torch.save``-able and readable with
        ``weights_only=True``. Hyper-parameters are not in it: they come from the constructor."""
        return {name: encode(getattr(self, name)) for name in self.state_attributes}

    def load_state_dict(self, state: dict) -> None:
        """Put :meth:`state_dict`'s output back into this drop-in, built as the saved one was (on
        the same model, with the same settings); a mismatch is a ``ValueError`` naming it, raised
        before anything is written."""
        who = type(self).__name__
        check_keys(who, state, self.state_attributes)
        for write in (False, True):  # every entry checked before the first is written
            decoded = {name: decode(getattr(self, name), state[name], who, name,
                                    self._state_device(), write=write)
                       for name in self.state_attributes}
        for name, value in decoded.items():
            setattr(self, name, value)

    def _state_device(self) -> torch.device:
        """Where a saved tensor goes that fills an entry still empty (None) here."""
        return torch.device("cpu")

    device_attributes: tuple[str, ...] = ()
    """Tensors besides the state that live beside the parameters (λ, a momentum): they move
    with the state (:meth:`_follow`)."""

    def _follow(self, device: torch.device) -> None:
        """Move this drop-in's tensors (``device_attributes``, then ``state_attributes``) to
        ``device``, where its parameters are now, if the model was moved there after the drop-in
        was built — as ``model.to(device)`` moved the parameters themselves — so that a drop-in
        built beside a CPU model (in a ``LightningModule.__init__``, before the trainer moves it)
        trains where the model does. A no-op while they are where they were. Dtypes are kept (a
        model converted after, ``model.double()``, computes the penalty in the wider type);
        random generators are left as they are: the drop-ins' own draw on the host and copy.
        """
        names = self.device_attributes + self.state_attributes
        held = _held_device([getattr(self, name) for name in names])
        if held is None or held == device:
            return
        for name in names:
            setattr(self, name, _moved_to(getattr(self, name), device))
        self._after_move()

    def _after_move(self) -> None:
        """After :meth:`_follow` moved the tensors: drop what was kept for the old device."""


class CoreState:
    """``state_dict()``/``load_state_dict()`` for a drop-in that runs a method's own machinery
    (Continual Backprop's generate-and-test, ReDo's recycler) over hidden layers: the layers'
    unit counts, checked on load, and everything that object holds but the network and the
    optimizer, in the form the engine's checkpoints store a method (:func:`plasticlab.checkpoint.capture`:
    tensors, arrays, counters, generators). A subclass defines :meth:`_state_parts`."""

    def _state_parts(self) -> tuple[object, list, Excluded]:
        """The object whose state is saved, the hidden layers, and what to leave out."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """The state of the method's machinery — per-unit statistics, counts, the random
        generators' positions — as tensors and plain values, ``torch.save``-able and readable
        with ``weights_only=True``. Hyper-parameters are not in it: they come from the
        constructor."""
        core, layers, excluded = self._state_parts()
        return {"units": [layer.units for layer in layers],
                "core": capture(core, excluded, type(self).__name__)}

    def load_state_dict(self, state: dict) -> None:
        """Put :meth:`state_dict`'s output back into this drop-in, built as the saved one was (on
        a model with the same hidden layers, with the same settings)."""
        who = type(self).__name__
        check_keys(who, state, ("units", "core"))
        core, layers, _ = self._state_parts()
        units = [layer.units for layer in layers]
        if list(state["units"]) != units:
            raise ValueError(f"{who}.load_state_dict: the state is of hidden layers of "
                             f"{list(state['units'])} units, this model's have {units}: was it "
                             "saved from another model?")
        restore(core, state["core"], layers[0].in_weight.device, who)


def check_keys(who: str, state, names: Sequence[str]) -> None:
    """``state`` is a dict with exactly the keys ``names``; else a ``ValueError`` saying which
    are missing and which are unknown."""
    if not isinstance(state, dict):
        raise ValueError(f"{who}.load_state_dict: expected the dict {who}.state_dict() gives, "
                         f"got {type(state).__name__}")
    missing = [n for n in names if n not in state]
    unknown = [k for k in state if k not in names]
    if missing or unknown:
        said = "; ".join(part for part in (f"missing {missing}" if missing else "",
                                           f"unknown {unknown}" if unknown else "") if part)
        raise ValueError(f"{who}.load_state_dict: the state's keys do not match ({said}); it holds "
                         f"{list(names) or 'nothing'}: was it saved by another drop-in?")


def encode(value):
    """``value`` as tensors and plain values: a tensor's copy, a generator's state, a module's
    ``state_dict()`` (copies), lists of those, numbers, strings, None."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, torch.Generator):
        return value.get_state()
    if isinstance(value, nn.Module):
        return {k: v.detach().clone() for k, v in value.state_dict().items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if value is None or isinstance(value, _SCALARS):
        return value
    raise TypeError(f"cannot encode a {type(value).__name__} as a drop-in's state")


def decode(current, saved, who: str, entry: str, device: torch.device, *, write: bool = True):
    """``saved`` (:func:`encode`'s output) written into ``current`` in place where it holds a
    tensor, generator or module; the value the attribute holds afterwards. ``who`` and ``entry``
    (the drop-in, the attribute) name it in errors; ``device``: where tensors go that fill an
    entry that is None here. ``write=False`` checks only (raises what writing would)."""
    def mismatch(what: str) -> ValueError:
        return ValueError(f"{who}.load_state_dict: {entry} {what}: was the state saved from "
                          f"another model, or with other settings?")

    if current is None:
        return nested_to_device(saved, device) if write else current
    if isinstance(current, torch.Generator):
        if not (isinstance(saved, torch.Tensor) and saved.dtype == torch.uint8
                and saved.shape == current.get_state().shape):
            raise mismatch(f"is a random generator here; the state holds {_described(saved)}")
        if write:
            current.set_state(saved)
        return current
    if isinstance(current, torch.Tensor):
        if not isinstance(saved, torch.Tensor) or saved.shape != current.shape:
            raise mismatch(f"is shaped {tuple(current.shape)} here; the state holds {_described(saved)}")
        if write:
            with torch.no_grad():
                current.copy_(saved)
        return current
    if isinstance(current, nn.Module):
        own = current.state_dict()
        if not isinstance(saved, dict) or list(saved) != list(own):
            raise mismatch(f"is a module with entries {list(own)} here; the state holds "
                           f"{list(saved) if isinstance(saved, dict) else _described(saved)}")
        for key, tensor in own.items():
            decode(tensor, saved[key], who, f"{entry}[{key!r}]", device, write=False)
        if write:
            current.load_state_dict(saved)
        return current
    if isinstance(current, list | tuple):
        if not isinstance(saved, list | tuple) or len(saved) != len(current):
            raise mismatch(f"holds {len(current)} entries here; the state holds {_described(saved)}")
        new = [decode(c, s, who, f"{entry}[{i}]", device, write=write)
               for i, (c, s) in enumerate(zip(current, saved, strict=True))]
        if not write:
            return current
        if isinstance(current, tuple):
            return tuple(new)
        current[:] = new
        return current
    if isinstance(current, _SCALARS):
        # a bool is an int to isinstance: a count must not come back as a flag, nor the reverse
        if type(saved) is not type(current) and not (type(current) is float and type(saved) is int):
            raise mismatch(f"is a {type(current).__name__} here; the state holds {saved!r}")
        return saved if write else current
    raise TypeError(f"{who}.load_state_dict: cannot load {entry}, a {type(current).__name__}")


def _held_device(value) -> torch.device | None:
    """The device of the first tensor (or module parameter) in ``value``; None if it holds none."""
    # Plain loops and a tuple of types: compiled steps trace this (a drop-in's _follow in a
    # captured hook), and torch 2.6's dynamo takes neither next() with a default nor a union
    # type in isinstance.
    if isinstance(value, torch.Tensor):
        return value.device
    items = value.parameters() if isinstance(value, nn.Module) else (
        value if isinstance(value, (list, tuple)) else ())  # noqa: UP038
    for item in items:
        device = _held_device(item)
        if device is not None:
            return device
    return None


def _moved_to(value, device: torch.device):
    """``value`` with every tensor on ``device``: lists and tuples rebuilt, a module moved in
    place."""
    if isinstance(value, nn.Module):
        return value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(_moved_to(v, device) for v in value)
    return nested_to_device(value, device)


def _described(saved) -> str:
    if isinstance(saved, torch.Tensor):
        return f"a tensor shaped {tuple(saved.shape)}"
    if isinstance(saved, list | tuple):
        return f"{len(saved)} entries"
    return f"a {type(saved).__name__}"
