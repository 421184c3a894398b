"""Fast paths: the switch, and where each one lives.

Each fast path computes what a plain form elsewhere in plasticlab computes — to the bit, or up
to rounding, as its docstring says — faster; states the condition under which it applies; and
has an equality test against the plain form. The plain forms are the code a reader follows;
each calls its fast path through one named choice (an ``applies`` function, or
``kernel_for``) that is false inside :func:`plain_forms`. Each fast path lives on the floor of
the code it speeds up, beside its plain form:

- :mod:`plasticlab.nets.linear_backward` — the ensemble linear layer's backward writing ∂L/∂W
  in W's own ``[K, out, in]`` layout. Plain form: :meth:`plasticlab.nets.EnsembleLinear.forward`,
  ``baddbmm(b, x, Wᵀ)`` through autograd (same forward, gradients up to rounding). Applies:
  run eagerly; traced by ``torch.compile``, ``traced_linear`` (the same ∂W layout in plain
  operations). Test: ``tests/test_fast_kernels.py``, ``tests/test_compiled_step.py``.
- :mod:`plasticlab.nets.ensemble_conv` — the K convolutions as a per-member loop with each
  member's convolution backward called directly, or as one grouped convolution. Plain form:
  :meth:`plasticlab.nets.EnsembleConv2d.forward`, one ``F.conv2d`` per member stacked (the loop
  bit-identical on the CPU, grouped up to rounding). Applies: always, in the form the layer's
  ``kernel`` names (``"auto"``: grouped on CUDA, the loop elsewhere). Test:
  ``tests/test_fast_kernels.py``, ``tests/test_nets.py``.
- :mod:`plasticlab.nets.max_pool_corners` — 2×2 max-pooling from the window corners. Plain
  form: ``F.max_pool2d`` in :func:`plasticlab.nets.max_pool` (bit-identical). Applies: on the
  CPU, even H and W. Test: ``tests/test_fast_kernels.py``, ``tests/test_nets.py``.
- :mod:`plasticlab.nets.pool_before_relu` — ReLU then pooling computed as pooling then ReLU.
  Plain form: :meth:`plasticlab.nets.Block.forward` (bit-identical). Applies: ReLU blocks with
  pooling whose features are not asked for. Test: ``tests/test_fast_kernels.py``,
  ``tests/test_nets.py``.
- :mod:`plasticlab.problems.task_examples` — a task's examples for every member gathered into a
  reused host buffer, or on the device from a resident copy of the data set. Plain form:
  :meth:`plasticlab.problems.base.Problem.start_task`, each member's examples permuted and
  stacked (bit-identical). Applies: always (the host form for CPU training, the device form
  otherwise). Test: ``tests/test_fast_kernels.py``, ``tests/test_problems.py``.
- :mod:`plasticlab.problems.task_prefetch` — the next task prepared in a background thread
  while this one trains, into the examples buffer of the task before. Plain form:
  :meth:`plasticlab.problems.base.Problem.start_task` preparing each task when it starts
  (bit-identical). Applies: CUDA training. Test: ``tests/test_fast_kernels.py``.
- :mod:`plasticlab.measure.folded_permutation` — a test set whose members share one image set
  under their own input permutations, evaluated with each permutation moved into the first
  layer's weights. Plain form: :func:`plasticlab.measure.held_out_accuracy`'s chunks of the
  permuted test set through the network (the same accuracies up to rounding of the logits).
  Applies: shared images under per-member permutations, a linear first layer. Test:
  ``tests/test_measurements.py``, ``tests/test_fast_kernels.py``.
- :func:`plasticlab.metrics.gram_singular_values` — a layer's singular values as the square
  roots of its Gram matrix's eigenvalues, in float64. Plain form: ``torch.linalg.svdvals`` in
  :func:`plasticlab.metrics.singular_values` (up to rounding). Applies: on CUDA, where the
  batched SVD stalled. Test: ``tests/test_metrics.py``.
- :mod:`plasticlab.step.mlp_backprop` — the ReLU MLP's training-step gradients written out by
  hand. Plain form: autograd (:func:`plasticlab.step.backward.autograd_gradients`; gradients up
  to rounding). Applies: the ensemble ReLU MLP, with the engine's ``backprop`` ``"auto"`` or
  ``"manual"``. Test: ``tests/test_backprop.py``.
- :func:`plasticlab.step.chain.decay_in_update` — L2's decay λθ added inside Adam's own pass.
  Plain form: the penalty's ``add_grad_`` before the update (bit-identical). Applies: L2 with
  one λ for every member, Adam without a decay of its own, on the CPU. Test:
  ``tests/test_regularizers.py``.
- :mod:`plasticlab.foreach_penalty` — a drop-in penalty's value and gradient over every
  parameter tensor as one autograd node of foreach kernels. Plain form:
  :meth:`plasticlab.regularizers.Regularizer.value` through autograd (the value up to rounding,
  the gradient λ·ρ′(θ − target) to the bit in the tests' loops). Applies: ρ = ½d² (L2, L2 Init,
  L2 Init + Resample, Wasserstein Init) or |d| (L1 Init), one model (no member dimension),
  floating parameters on one device, autograd recording, λ not learnt. Test:
  ``tests/test_foreach_penalty.py``.
- :mod:`plasticlab.rank_order` — Wasserstein Init's per-step stable argsort of each parameter
  tensor, sorted from the last step's order by keys of value and position. Plain form:
  ``argsort(stable=True)`` in :meth:`plasticlab.regularizers.WassersteinInit.targets`
  (bit-identical). Applies: float32, from a tensor's second sort on. Test:
  ``tests/test_toolkit_wasserstein_init.py``.
- :mod:`plasticlab.step.compiled` — the whole training step (the hand-written backward or
  ``torch.func``'s gradient through the network, the penalties, the method's gradient
  transform, Adam's or SGD's rule, the method's post-step hook) as one function under
  ``torch.compile``. Plain form: the eager step (up to rounding; member k still seed k alone to
  the bit on the CPU). Applies: asked for (``compile=True``), an MLP, a method whose links are
  each written for capture (or whose hook acts on some steps only: those steps eager), and
  Adam or SGD (:func:`plasticlab.step.compiled.why_eager` names what stops it).
  Test:
  ``tests/test_compiled_step.py``.

Each applies only outside :func:`plain_forms`. Three fast forms stay inside the object they
speed up, chosen there and not by :func:`plain_forms`: :class:`plasticlab.optim.Adam`'s torch
fused kernel (:mod:`plasticlab.optim.fused_adam`; plain form ``fused=False``,
:func:`plasticlab.optim.adam.adam_update_`; test: ``tests/test_optim.py``),
:class:`plasticlab.optim.SGD`'s fused multiply-add (plain form ``fused=False``,
:func:`plasticlab.optim.sgd.sgd_update_`; test: ``tests/test_optim.py``), and
:func:`plasticlab.measure.held_out_batches` building a chunk of shared images under per-member
permutations by normalising the images once and gathering every member's permutation at once
(plain form: its per-member stack and gather; bit-identical; test:
``tests/test_measurements.py``).

This module sits in plasticlab's lowest layer, so that every layer can ask it.
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
