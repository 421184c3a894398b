"""Fast paths. Each one computes what a plain form elsewhere in plasticlab computes — to the bit,
or up to rounding, as its docstring says — faster; states the condition under which it applies;
and has an equality test against the plain form. The plain forms are the code a reader
follows; the engine chooses these where they apply.

- :mod:`.quadratic_penalty` — plain form :meth:`plasticlab.regularizers.Regularizer.add_grad_`;
  applies to L2's and L2 Init's gradient, and hands their decay to Adam's pass on the CPU;
- :mod:`plasticlab.nets.backprop` — plain form: autograd; applies to the ReLU MLP.

Other device- and shape-specific kernels live with the layer they speed up and say so
(:mod:`plasticlab.nets.layers`: the ensemble linear layer's backward, the per-member
convolution loop or grouped convolution, 2×2 pooling from window corners; :mod:`plasticlab.measure`:
the test permutation moved into the first layer; :mod:`plasticlab.problems.base`: a task's
examples gathered on the host or the device).
"""
