"""plasticlab.nets: the SPEC §4 networks, the ensemble layers and the init schemes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from plasticlab.nets import (
    INIT_SCHEMES,
    EnsembleConv2d,
    EnsembleLayerNorm,
    EnsembleLinear,
    build_network,
    concat_relu,
    hidden_sizes,
    max_pool,
)
from plasticlab.nets import init as init_schemes
from plasticlab.nets import max_pool_corners as fast_max_pool
from plasticlab.nets.max_pool_corners import MaxPool2x2Function, max_pool2x2
from plasticlab.rng import torch_generator

torch.set_num_threads(1)


def linear_count(fan_in: int, fan_out: int) -> int:
    return fan_in * fan_out + fan_out


def conv_count(c_in: int, c_out: int, k: int) -> int:
    return c_in * c_out * k * k + c_out


def layer_shapes(net) -> list[tuple[int, ...]]:
    """Member weight shapes of the affine layers, input to output."""
    return [tuple(layer.weight.shape[1:]) for layer in net.affine_layers]


# --- architectures and parameter counts ---------------------------------------------------------


def test_mlp_has_89610_parameters_per_member():
    net = build_network("mlp", 3, (784,), 10)
    assert 784 * 100 + 100 + 100 * 100 + 100 + 100 * 10 + 10 == 89_610
    assert net.parameter_count() == 89_610
    assert layer_shapes(net) == [(100, 784), (100, 100), (10, 100)]
    assert all(p.shape[0] == 3 for p in net.parameters())


def test_cnn_has_two_5x5_convs_and_three_fc_layers_per_spec():
    net = build_network("cnn", 2, (3, 32, 32), 10)
    expected = (conv_count(3, 16, 5) + conv_count(16, 16, 5) + linear_count(400, 100)
                + linear_count(100, 100) + linear_count(100, 10))
    assert net.parameter_count() == expected
    assert layer_shapes(net) == [(16, 3, 5, 5), (16, 16, 5, 5), (100, 400), (100, 100), (10, 100)]


def test_cnn_outputs_for_five_plus_one_cifar_and_imagenet():
    assert layer_shapes(build_network("cnn", 1, (3, 32, 32), 100))[-1] == (100, 100)
    assert layer_shapes(build_network("cnn", 1, (3, 32, 32), 2))[-1] == (2, 100)


def test_wider_mlp_multiplies_every_hidden_layer_by_4():
    net = build_network("mlp", 1, (784,), 10, width=4)
    assert layer_shapes(net) == [(400, 784), (400, 400), (10, 400)]
    assert net.parameter_count() == linear_count(784, 400) + linear_count(400, 400) + linear_count(400, 10)


def test_wider_cnn_multiplies_channels_and_fc_by_4():
    net = build_network("cnn", 1, (3, 32, 32), 10, width=4)
    assert layer_shapes(net) == [(64, 3, 5, 5), (64, 64, 5, 5), (400, 64 * 5 * 5), (400, 400), (10, 400)]


def test_deeper_mlp_has_four_hidden_layers_of_100():
    net = build_network("mlp", 1, (784,), 10, extra_layers=2)
    assert layer_shapes(net) == [(100, 784)] + [(100, 100)] * 3 + [(10, 100)]
    assert len(net.hidden_blocks) == 4


def test_deeper_cnn_has_5_3_3_convs_and_three_fc_layers_with_flatten_256():
    net = build_network("cnn", 1, (3, 32, 32), 10, extra_layers=2)
    # 32 -5+1-> 28 -pool-> 14 -3+1-> 12 -pool-> 6 -3+1-> 4 (no pool): 16·4·4 = 256
    assert layer_shapes(net) == [(16, 3, 5, 5), (16, 16, 3, 3), (16, 16, 3, 3),
                                 (100, 256), (100, 100), (100, 100), (10, 100)]
    assert net(torch.randn(1, 2, 3, 32, 32)).shape == (1, 2, 10)


def test_cnn_with_one_extra_layer_is_a_value_error():
    with pytest.raises(ValueError, match="extra_layers"):
        build_network("cnn", 1, (3, 32, 32), 10, extra_layers=1)


@pytest.mark.parametrize("kwargs", [{"arch": "rnn"}, {"width": 0}, {"extra_layers": -1}])
def test_bad_architecture_arguments_are_value_errors(kwargs):
    args = {"arch": "mlp", "width": 1.0, "extra_layers": 0} | kwargs
    with pytest.raises(ValueError):
        hidden_sizes(args["arch"], args["width"], args["extra_layers"])


def test_unknown_activation_is_a_value_error():
    with pytest.raises(ValueError, match="activation"):
        build_network("mlp", 1, (784,), 10, activation="gelu")


def test_concat_relu_network_doubles_the_next_layers_fan_in():
    mlp = build_network("mlp", 1, (784,), 10, activation="concat_relu")
    assert layer_shapes(mlp) == [(100, 784), (100, 200), (10, 200)]
    cnn = build_network("cnn", 1, (3, 32, 32), 10, activation="concat_relu")
    assert layer_shapes(cnn) == [(16, 3, 5, 5), (16, 32, 5, 5), (100, 32 * 5 * 5), (100, 200), (10, 200)]
    assert cnn(torch.randn(1, 2, 3, 32, 32)).shape == (1, 2, 10)


# --- ensemble layers equal the plain PyTorch layers per member ------------------------------------


def test_ensemble_linear_member_slices_are_bit_identical_to_f_linear():
    gen = torch.Generator().manual_seed(0)
    for K, B, fan_in, fan_out in [(1, 16, 20, 16), (4, 16, 784, 100), (3, 7, 100, 10)]:
        layer = EnsembleLinear(K, fan_in, fan_out)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen))
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))
        x = torch.randn(K, B, fan_in, generator=gen)
        y = layer(x)
        for k in range(K):
            assert torch.equal(y[k], F.linear(x[k], layer.weight[k], layer.bias[k]))


@pytest.mark.parametrize("kernel", ["loop", "grouped"])
def test_ensemble_conv2d_member_slices_equal_f_conv2d(kernel):
    gen = torch.Generator().manual_seed(1)
    K, B, C, H = 3, 4, 3, 12
    layer = EnsembleConv2d(K, C, 5, 3, kernel=kernel)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen))
        layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))
    x = torch.randn(K, B, C, H, H, generator=gen)
    y = layer(x)
    assert y.shape == (K, B, 5, H - 2, H - 2)
    for k in range(K):
        torch.testing.assert_close(y[k], F.conv2d(x[k], layer.weight[k], layer.bias[k]),
                                   rtol=0, atol=1e-5)


def test_conv_loop_and_grouped_kernels_agree_in_value_and_gradient():
    gen = torch.Generator().manual_seed(2)
    K, B = 4, 3
    loop = EnsembleConv2d(K, 16, 16, 5, kernel="loop")
    other = EnsembleConv2d(K, 16, 16, 5, kernel="grouped")
    with torch.no_grad():
        loop.weight.copy_(torch.randn(loop.weight.shape, generator=gen) * 0.05)
        loop.bias.copy_(torch.randn(loop.bias.shape, generator=gen))
        other.weight.copy_(loop.weight)
        other.bias.copy_(loop.bias)
    x = torch.randn(K, B, 16, 14, 14, generator=gen)
    x_loop, x_other = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_loop, y_other = loop(x_loop), other(x_other)
    torch.testing.assert_close(y_loop, y_other, rtol=0, atol=1e-5)
    y_loop.square().sum().backward()
    y_other.square().sum().backward()
    torch.testing.assert_close(loop.weight.grad, other.weight.grad, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(loop.bias.grad, other.bias.grad, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(x_loop.grad, x_other.grad, rtol=1e-5, atol=1e-5)


def test_conv_loop_gradients_equal_autograd_through_per_member_conv2d():
    # the loop kernel's own backward against its simple form: autograd through F.conv2d per member
    gen = torch.Generator().manual_seed(3)
    K, B = 3, 4
    layer = EnsembleConv2d(K, 3, 16, 5, kernel="loop")
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.1)
        layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))
    x = torch.randn(K, B, 3, 12, 12, generator=gen, requires_grad=True)
    grad_y = torch.randn(K, B, 16, 8, 8, generator=gen)
    layer(x).backward(grad_y)
    ours = [x.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone()]
    x.grad = layer.weight.grad = layer.bias.grad = None
    torch.stack([F.conv2d(x[k], layer.weight[k], layer.bias[k]) for k in range(K)]).backward(grad_y)
    for a, b in zip(ours, [x.grad, layer.weight.grad, layer.bias.grad], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("ties", [False, True])
def test_max_pool_equals_f_max_pool2d_in_value_index_and_gradient(ties):
    gen = torch.Generator().manual_seed(4)
    h = torch.relu(torch.randn(6, 5, 28, 28, generator=gen))
    if ties:  # many equal maxima: zeros after ReLU and rounded values
        h = h.round()
    h.requires_grad_()
    grad_y = torch.randn(6, 5, 14, 14, generator=gen)
    y = max_pool2x2(h)
    y.backward(grad_y)
    ours = h.grad.clone()
    h.grad = None
    expected, expected_indices = F.max_pool2d(h, 2, return_indices=True)
    expected.backward(grad_y)
    assert torch.equal(y, expected)
    assert torch.equal(MaxPool2x2Function.apply(h.detach())[1], expected_indices)
    assert torch.equal(ours, h.grad)


def test_max_pool_of_odd_sizes_floors_like_f_max_pool2d():
    h = torch.randn(2, 3, 9, 7)
    assert not fast_max_pool.applies(h)  # the window corners need even sizes
    assert torch.equal(max_pool(h[None]), F.max_pool2d(h, 2)[None])


def test_conv_kernel_name_is_checked():
    with pytest.raises(ValueError, match="kernel"):
        EnsembleConv2d(1, 3, 4, 3, kernel="fft")


@pytest.mark.parametrize("shape", [(7,), (4, 5, 5)])
def test_ensemble_layer_norm_equals_nn_layer_norm_per_member(shape):
    gen = torch.Generator().manual_seed(3)
    K, B = 3, 6
    ens = EnsembleLayerNorm(K, shape)
    with torch.no_grad():
        ens.weight.copy_(torch.randn(ens.weight.shape, generator=gen))
        ens.bias.copy_(torch.randn(ens.bias.shape, generator=gen))
    x = torch.randn(K, B, *shape, generator=gen) * 3 + 1
    y = ens(x)
    for k in range(K):
        ref = nn.LayerNorm(shape)
        with torch.no_grad():
            ref.weight.copy_(ens.weight[k])
            ref.bias.copy_(ens.bias[k])
        torch.testing.assert_close(y[k], ref(x[k]), rtol=0, atol=1e-6)


def test_ensemble_layer_norm_starts_as_identity_affine():
    ens = EnsembleLayerNorm(2, (5,))
    assert torch.equal(ens.weight, torch.ones(2, 5)) and torch.equal(ens.bias, torch.zeros(2, 5))


def test_concat_relu_doubles_features_as_relu_of_x_and_minus_x():
    h = torch.randn(2, 3, 4)
    y = concat_relu(h)
    assert y.shape == (2, 3, 8)
    assert torch.equal(y, torch.cat([torch.relu(h), torch.relu(-h)], dim=2))
    conv_features = torch.randn(2, 3, 4, 5, 5)
    assert concat_relu(conv_features).shape == (2, 3, 8, 5, 5)


def plain_mlp_member(net, k: int) -> nn.Sequential:
    layers = []
    for layer in net.affine_layers:
        lin = nn.Linear(layer.in_features, layer.out_features)
        with torch.no_grad():
            lin.weight.copy_(layer.weight[k])
            lin.bias.copy_(layer.bias[k])
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def plain_cnn_member(net, k: int) -> nn.Sequential:
    conv1, conv2, *fcs = net.affine_layers
    mods: list[nn.Module] = []
    for conv in (conv1, conv2):
        c = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size)
        with torch.no_grad():
            c.weight.copy_(conv.weight[k])
            c.bias.copy_(conv.bias[k])
        mods += [c, nn.ReLU(), nn.MaxPool2d(2)]
    mods.append(nn.Flatten())
    fc_net = plain_mlp_member(type("N", (), {"affine_layers": fcs})(), k)
    return nn.Sequential(*mods, *fc_net)


def test_every_mlp_member_computes_the_plain_pytorch_mlp():
    net = build_network("mlp", 3, (784,), 10)
    x = torch.randn(3, 5, 784)
    y = net(x)
    for k in range(3):
        torch.testing.assert_close(y[k], plain_mlp_member(net, k)(x[k]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kernel", ["loop", "grouped"])
def test_every_cnn_member_computes_the_plain_pytorch_cnn(kernel):
    net = build_network("cnn", 2, (3, 32, 32), 10, conv_kernel=kernel)
    x = torch.randn(2, 4, 3, 32, 32)
    y = net(x)
    for k in range(2):
        torch.testing.assert_close(y[k], plain_cnn_member(net, k)(x[k]), rtol=0, atol=1e-5)


# --- init schemes ------------------------------------------------------------------------------------

FAN_IN, FAN_OUT = 400, 1000


def big_draw(scheme: str, seed: int = 0):
    return init_schemes.draw(scheme, (FAN_OUT, FAN_IN), FAN_IN, FAN_OUT, torch.Generator().manual_seed(seed))


def test_torch_default_weights_and_biases_are_uniform_within_one_over_sqrt_fan_in():
    bound = 1 / math.sqrt(FAN_IN)
    w, b = big_draw("torch_default")
    assert w.abs().max() <= bound and b.abs().max() <= bound
    assert w.abs().max() > 0.99 * bound  # fills the interval
    assert abs(w.std().item() - bound / math.sqrt(3)) < 0.05 * bound / math.sqrt(3)
    assert abs(w.mean().item()) < 0.01 * bound
    # uniform, not bell-shaped: each quarter of the interval holds a quarter of the draws
    counts = torch.histc(w, bins=4, min=-bound, max=bound) / w.numel()
    torch.testing.assert_close(counts, torch.full((4,), 0.25), rtol=0, atol=0.01)
    assert b.std() > 0  # biases are drawn too, not zero


def test_torch_default_matches_nn_linear_and_nn_conv2d_bounds_in_a_built_network():
    net = build_network("cnn", 2, (3, 32, 32), 10, generators=[torch_generator(s, "init") for s in (0, 1)])
    for layer, fan_in in zip(net.affine_layers, (3 * 25, 16 * 25, 400, 100, 100), strict=True):
        assert layer.fan_in == fan_in
        bound = 1 / math.sqrt(fan_in)
        assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound
        assert layer.bias.abs().max() > 0


def test_kaiming_normal_std_is_sqrt_2_over_fan_in():
    w, b = big_draw("kaiming_normal")
    std = math.sqrt(2 / FAN_IN)
    assert abs(w.std().item() - std) < 0.05 * std
    assert w.abs().max() > 3 * std  # normal tails, not a bounded draw


def test_kaiming_uniform_bound_is_sqrt_6_over_fan_in():
    w, _ = big_draw("kaiming_uniform")
    bound = math.sqrt(6 / FAN_IN)
    assert w.abs().max() <= bound and w.abs().max() > 0.99 * bound


def test_xavier_uniform_bound_is_sqrt_6_over_fan_in_plus_fan_out():
    w, _ = big_draw("xavier_uniform")
    bound = math.sqrt(6 / (FAN_IN + FAN_OUT))
    assert w.abs().max() <= bound and w.abs().max() > 0.99 * bound
    assert abs(w.std().item() - bound / math.sqrt(3)) < 0.05 * bound / math.sqrt(3)


def test_xavier_normal_std_is_sqrt_2_over_fan_in_plus_fan_out():
    w, _ = big_draw("xavier_normal")
    std = math.sqrt(2 / (FAN_IN + FAN_OUT))
    assert abs(w.std().item() - std) < 0.05 * std


@pytest.mark.parametrize("scheme", [s for s in INIT_SCHEMES if s != "torch_default"])
def test_non_default_schemes_have_zero_bias(scheme):
    _, b = big_draw(scheme)
    assert torch.equal(b, torch.zeros(FAN_OUT))
    net = build_network("mlp", 2, (784,), 10, init=scheme)
    assert all(torch.equal(layer.bias, torch.zeros_like(layer.bias)) for layer in net.affine_layers)
    assert all(layer.weight.abs().sum() > 0 for layer in net.affine_layers)


def test_unknown_init_scheme_is_a_value_error_listing_the_valid_ones():
    with pytest.raises(ValueError, match="torch_default"):
        build_network("mlp", 1, (784,), 10, init="orthogonal")
    with pytest.raises(ValueError, match="xavier_normal"):
        big_draw("orthogonal")


@pytest.mark.parametrize("arch,shape", [("mlp", (784,)), ("cnn", (3, 32, 32))])
@pytest.mark.parametrize("scheme", ["torch_default", "kaiming_normal"])
def test_member_init_is_the_same_alone_and_in_an_ensemble_of_four(arch, shape, scheme):
    seeds = [11, 12, 13, 14]
    ensemble = build_network(arch, 4, shape, 10, init=scheme,
                             generators=[torch_generator(s, "init") for s in seeds])
    for k, seed in enumerate(seeds):
        alone = build_network(arch, 1, shape, 10, init=scheme, generators=[torch_generator(seed, "init")])
        for p_alone, p_ens in zip(alone.parameters(), ensemble.parameters(), strict=True):
            assert torch.equal(p_alone[0], p_ens[k])
    a, b = ensemble.affine_layers[0].weight[0], ensemble.affine_layers[0].weight[1]
    assert not torch.equal(a, b)


def test_same_seed_gives_the_same_network_and_sample_init_is_a_fresh_draw():
    def gens():
        return [torch_generator(5, "init")]

    a = build_network("mlp", 1, (784,), 10, generators=gens())
    b = build_network("mlp", 1, (784,), 10, generators=gens())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    # sample_init with the init generator reproduces θ₀; with another stream it is a new draw
    again = a.sample_init(gens())
    assert all(torch.equal(p, q) for p, q in zip(a.regularized_parameters(), again, strict=True))
    other = a.sample_init([torch_generator(5, "other")])
    assert not torch.equal(other[0], a.regularized_parameters()[0])
    with pytest.raises(ValueError, match="generator"):
        a.sample_init(gens() * 2)


# --- features and regularized parameters ---------------------------------------------------------------


def test_mlp_forward_returns_one_feature_tensor_per_hidden_block():
    net = build_network("mlp", 3, (784,), 10, extra_layers=2)
    logits, feats = net(torch.randn(3, 5, 784), return_features=True)
    assert logits.shape == (3, 5, 10)
    assert [tuple(f.shape) for f in feats] == [(3, 5, 100)] * 4
    assert all((f >= 0).all() for f in feats)  # post-ReLU


def test_cnn_forward_returns_post_activation_features_before_pooling():
    net = build_network("cnn", 2, (3, 32, 32), 10)
    logits, feats = net(torch.randn(2, 4, 3, 32, 32), return_features=True)
    assert logits.shape == (2, 4, 10)
    assert [tuple(f.shape) for f in feats] == [(2, 4, 16, 28, 28), (2, 4, 16, 10, 10),
                                               (2, 4, 100), (2, 4, 100)]


def test_concat_relu_features_have_twice_the_units():
    net = build_network("mlp", 1, (784,), 10, activation="concat_relu")
    _, feats = net(torch.randn(1, 2, 784), return_features=True)
    assert [tuple(f.shape) for f in feats] == [(1, 2, 200), (1, 2, 200)]


def test_forward_without_features_returns_the_same_logits():
    net = build_network("mlp", 2, (784,), 10)
    x = torch.randn(2, 3, 784)
    logits, _ = net(x, return_features=True)
    assert torch.equal(logits, net(x))


@pytest.mark.parametrize("extra_layers", [0, 2])
def test_cnn_pooling_before_relu_gives_the_same_logits_and_gradients(extra_layers):
    # without features the CNN pools before its ReLU; with them, after (the simple form)
    net = build_network("cnn", 2, (3, 32, 32), 10, extra_layers=extra_layers,
                        generators=[torch_generator(s, "init") for s in (0, 1)])
    x = torch.randn(2, 6, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    pooled_first = net(x)
    pooled_first.square().sum().backward()
    fast = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    relu_first, _ = net(x, return_features=True)
    relu_first.square().sum().backward()
    assert torch.equal(pooled_first, relu_first)
    for a, p in zip(fast, net.parameters(), strict=True):
        assert torch.equal(a, p.grad)
    # the forms really differ: some windows pass no gradient through a non-positive maximum
    h = net.blocks[0].pre_activation(x)
    assert bool((max_pool(h) <= 0).any())


@pytest.mark.parametrize("arch,shape", [("mlp", (784,)), ("cnn", (3, 32, 32))])
def test_regularized_parameters_are_all_weights_and_biases_but_not_layer_norm(arch, shape):
    net = build_network(arch, 2, shape, 10, layer_norm=True)
    reg = net.regularized_parameters()
    reg_ids = {id(p) for p in reg}
    norm_params = [p for m in net.modules() if isinstance(m, EnsembleLayerNorm) for p in m.parameters()]
    assert len(norm_params) == 2 * len(net.hidden_blocks)
    assert not reg_ids & {id(p) for p in norm_params}
    assert reg_ids | {id(p) for p in norm_params} == {id(p) for p in net.parameters()}
    assert len(reg) == 2 * len(net.affine_layers)  # a weight and a bias per layer


def test_layer_norm_sits_after_each_hidden_affine_over_channels_height_width():
    net = build_network("cnn", 1, (3, 32, 32), 10, layer_norm=True)
    norms = [b.norm.normalized_shape for b in net.hidden_blocks]
    assert norms == [(16, 28, 28), (16, 10, 10), (100,), (100,)]
    assert net.blocks[-1].norm is None
    assert net(torch.randn(1, 2, 3, 32, 32)).shape == (1, 2, 10)


@pytest.mark.parametrize("scheme", init_schemes.INIT_SCHEMES)
@pytest.mark.parametrize("weight_shape", [(100, 784), (10, 100), (16, 3, 5, 5), (3, 7)])
def test_the_draws_are_the_formulas_every_result_was_trained_with_to_the_bit(scheme, weight_shape):
    """Every result on record was drawn as ``(rand·2 − 1)·bound`` or ``randn·std``, member by
    member, weight then bias; drawing in place into each member's row must give the same bits
    and leave each generator where those formulas left it."""
    fan_in = math.prod(weight_shape[1:])
    fan_out = weight_shape[0] * math.prod(weight_shape[2:])
    bound = {"torch_default": 1 / math.sqrt(fan_in), "kaiming_uniform": math.sqrt(6 / fan_in),
             "xavier_uniform": math.sqrt(6 / (fan_in + fan_out))}
    std = {"kaiming_normal": math.sqrt(2 / fan_in), "xavier_normal": math.sqrt(2 / (fan_in + fan_out))}

    def formula(g):
        if scheme in bound:
            w = (torch.rand(weight_shape, generator=g) * 2 - 1) * bound[scheme]
        else:
            w = torch.randn(weight_shape, generator=g) * std[scheme]
        b = ((torch.rand(weight_shape[0], generator=g) * 2 - 1) * bound[scheme]
             if scheme == "torch_default" else torch.zeros(weight_shape[0]))
        return w, b

    seeds = [3, 1, 4]
    expected = [formula(torch.Generator().manual_seed(s)) for s in seeds]
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    weight, bias = init_schemes.draw_members(scheme, weight_shape, fan_in, fan_out, generators, "cpu")
    assert torch.equal(weight, torch.stack([w for w, _ in expected]))
    assert torch.equal(bias, torch.stack([b for _, b in expected]))
    alone = init_schemes.draw(scheme, weight_shape, fan_in, fan_out, torch.Generator().manual_seed(4))
    assert torch.equal(alone[0], weight[2]) and torch.equal(alone[1], bias[2])
    after = torch.Generator().manual_seed(3)
    formula(after)
    assert torch.equal(generators[0].get_state(), after.get_state())
