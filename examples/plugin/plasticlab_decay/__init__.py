"""A plasticlab plugin: a method (:class:`~plasticlab_decay.methods.Decay`) and a problem
(:class:`~plasticlab_decay.problems.PermutedMNISTQuick`), found through this package's entry
points."""
