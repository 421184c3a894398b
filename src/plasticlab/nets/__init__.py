"""Ensemble layers and the paper's MLP and CNN (SPEC §4)."""

from .init import INIT_SCHEMES
from .layers import (
    ACTIVATIONS,
    EnsembleConv2d,
    EnsembleLayerNorm,
    EnsembleLinear,
    concat_relu,
    max_pool,
    relu,
)
from .network import (
    Block,
    EnsembleNet,
    build_network,
    concat_relu_scale,
    hidden_sizes,
    layer_plan,
    matched_scale,
    plan_parameter_count,
)

__all__ = [
    "ACTIVATIONS", "INIT_SCHEMES", "Block", "EnsembleConv2d", "EnsembleLayerNorm",
    "EnsembleLinear", "EnsembleNet", "build_network", "concat_relu", "hidden_sizes", "max_pool",
    "relu", "concat_relu_scale", "layer_plan", "matched_scale", "plan_parameter_count",
]
