"""Fast paths. Each one computes what a plain form elsewhere in plasticlab computes — to the bit,
or up to rounding, as its docstring says — faster; states the condition under which it applies;
and has an equality test against the plain form. The plain forms are the code a reader
follows; each calls its fast path through one named choice (an ``applies`` function, or
``kernel_for``) that is false inside :func:`plain_forms`.

The fast paths, one module each:

- :mod:`.linear_backward` — the ensemble linear layer's backward writing ∂L/∂W in W's own
  ``[K, out, in]`` layout. Plain form: :meth:`plasticlab.nets.EnsembleLinear.forward`,
  ``baddbmm(b, x, Wᵀ)`` through autograd (same forward, gradients up to rounding). Applies:
  always. Test: ``tests/test_fast_kernels.py``.
- :mod:`.ensemble_conv` — the K convolutions as a per-member loop with each member's
  convolution backward called directly, or as one grouped convolution. Plain form:
  :meth:`plasticlab.nets.EnsembleConv2d.forward`, one ``F.conv2d`` per member stacked (the loop
  bit-identical on the CPU, grouped up to rounding). Applies: always, in the form the layer's
  ``kernel`` names (``"auto"``: grouped on CUDA, the loop elsewhere). Test:
  ``tests/test_fast_kernels.py``, ``tests/test_nets.py``.
- :mod:`.max_pool` — 2×2 max-pooling from the window corners. Plain form:
  ``F.max_pool2d`` in :func:`plasticlab.nets.max_pool` (bit-identical). Applies: on the CPU,
  even H and W. Test: ``tests/test_fast_kernels.py``, ``tests/test_nets.py``.
- :mod:`.pool_before_relu` — ReLU then pooling computed as pooling then ReLU. Plain form:
  :meth:`plasticlab.nets.Block.forward` (bit-identical). Applies: ReLU blocks with pooling
  whose features are not asked for. Test: ``tests/test_fast_kernels.py``, ``tests/test_nets.py``.
- :mod:`.mlp_backprop` — the ReLU MLP's training-step gradients written out by hand. Plain
  form: autograd (gradients up to rounding). Applies: the ensemble ReLU MLP, with the engine's
  ``backprop`` ``"auto"`` or ``"manual"``. Test: ``tests/test_backprop.py``.
- :mod:`.quadratic_penalty` — L2's and L2 Init's gradient λ(θ − target) with the difference
  kept in a buffer across steps, and L2's decay handed to Adam's pass on the CPU. Plain form:
  :meth:`plasticlab.regularizers.Regularizer.add_grad_` (bit-identical; the decay in Adam
  bit-identical to adding it before). Applies: L2 and L2 Init (Adam's pass: L2, on the CPU,
  with the conditions its docstring lists). Test:
  ``tests/test_regularizers.py``.
- :mod:`.task_examples` — a task's examples for every member gathered into a reused host
  buffer, or on the device from a resident copy of the data set. Plain form:
  :meth:`plasticlab.problems.base.Problem.start_task`, each member's examples permuted and
  stacked (bit-identical). Applies: always (the host form for CPU training, the device form
  otherwise). Test: ``tests/test_fast_kernels.py``, ``tests/test_problems.py``.
- :mod:`.task_prefetch` — the next task prepared in a background thread while this one
  trains, into the examples buffer of the task before. Plain form:
  :meth:`plasticlab.problems.base.Problem.start_task` preparing each task when it starts
  (bit-identical). Applies: CUDA training. Test: ``tests/test_fast_kernels.py``.
- :mod:`.folded_permutation` — a test set whose members share one image set under their own
  input permutations, evaluated with each permutation moved into the first layer's weights.
  Plain form: :func:`plasticlab.measure.held_out_accuracy`'s chunks of the permuted test set
  through the network (the same accuracies up to rounding of the logits). Applies: shared
  images under per-member permutations, a linear first layer. Test:
  ``tests/test_measurements.py``, ``tests/test_fast_kernels.py``.
- :mod:`.compiled_step` — the whole training step (the hand-written backward, the penalties
  toward a fixed target, Adam or SGD) as one function under ``torch.compile``. Plain form: the
  engine's eager step (up to rounding; member k still seed k alone to the bit on the CPU).
  Applies: asked for (``compile=True``), the MLP with the Baseline, L2, L2 Init, L1 Init, Huber
  Init or members of those, and Adam or SGD. Test: ``tests/test_compiled_step.py``.

Each applies only outside :func:`plain_forms`. Two fast forms stay inside the object they speed
up, chosen there and not by :func:`plain_forms`: :class:`plasticlab.optim.Adam`'s torch fused
kernel (plain form: ``fused=False``, the per-tensor loop; test: ``tests/test_optim.py``), and
:func:`plasticlab.measure.held_out_batches` building a chunk of shared images under per-member
permutations by normalising the images once and gathering every member's permutation at once
(plain form: its per-member stack and gather; bit-identical; test: ``tests/test_measurements.py``).

Layers (``plasticlab/__init__.py``): this package itself (the switch) and the modules that read
tensors alone sit in plasticlab's lowest layer, so ``nets`` and ``problems`` can call them;
:mod:`.mlp_backprop`, :mod:`.quadratic_penalty` and :mod:`.folded_permutation` read networks,
regularizers and problems and sit above those; :mod:`.compiled_step` reads the methods and sits
above them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_plain = False  # inside plain_forms(): every fast path is off


def enabled() -> bool:
    """Whether fast paths may run: False inside :func:`plain_forms`."""
    return not _plain


@contextmanager
def plain_forms() -> Iterator[None]:
    """Run every plain form inside the ``with`` block: no fast path applies there (for tests
    that compare a fast path with its plain form). Choices made once (the engine's backward,
    the penalty's gradient) follow the switch when the training is set up; the layers' kernels
    at every call."""
    global _plain
    before = _plain
    _plain = True
    try:
        yield
    finally:
        _plain = before


__all__ = ["enabled", "plain_forms"]
