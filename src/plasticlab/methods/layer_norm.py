"""Layer Norm (Ba et al. 2016; Lyle et al. 2023): a LayerNorm after each hidden Linear/Conv,
before the ReLU (over C, H, W for convolutions). Its gain and bias are trained but never
regularized."""

from .base import Method


class LayerNorm(Method):
    """Layer Norm: LayerNorm(Wx + b) before every hidden ReLU; its gain and bias are trained."""

    name = "layer_norm"
    title = "Layer Norm"
    description = "LayerNorm before every hidden activation"

    @classmethod
    def architecture(cls, hp, net):
        return {"layer_norm": True}
