"""Concat ReLU (Shang et al. 2016; Abbas et al. 2023): CReLU(x) = ReLU([x, −x]).

Each hidden layer passes both signs on, so no unit can go fully dead; the next layer's fan-in
doubles. For a fair comparison the hidden widths shrink by the smallest fraction that keeps
the parameter count at least the plain network's — computed for the problem's network
(:func:`plasticlab.nets.concat_relu_scale`), not hard-coded.
"""

from ..nets import concat_relu_scale
from .base import Method


class ConcatReLU(Method):
    """Concat ReLU: every hidden activation is CReLU(x) = [ReLU(x), ReLU(−x)], in a network
    whose hidden widths are shrunk to keep the plain network's parameter count."""

    name = "concat_relu"
    title = "Concat ReLU"
    description = "CReLU activations, widths shrunk to the plain net's parameter count"

    @classmethod
    def architecture(cls, hp, net):
        scale = concat_relu_scale(net["arch"], net["input_shape"], net["num_outputs"],
                                  width=net["width"], extra_layers=net["extra_layers"])
        return {"activation": "concat_relu", "hidden_scale": scale}
