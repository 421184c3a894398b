"""plasticlab.philox: Philox-4x32-10 written with torch tensor operations, its keys and
counters, and its transforms to uniform and normal floats.

What pins the generator down:

- Random123's published known answers (``tests/kat_vectors`` of DEShawResearch/random123, the
  ``philox4x32 10`` and ``philox4x64 10`` lines: counter words, key words → output words);
- NumPy: ``numpy.random.Philox`` is Philox-**4x64**-10, not 4x32 (``_philox.pyx``: "Container
  for the Philox (4x64) pseudo-random number generator"; ``src/philox/philox.h``), so it cannot
  check a 4x32 output directly. :func:`reference` below is one plain-Python Philox for both word
  widths; at 64 bits it reproduces NumPy's raw output bit for bit (which pins the round, the key
  schedule, and the order of counter, key and output words), at 32 bits Random123's answers
  (which pin the 4x32 constants), and the torch generator reproduces it at 32 bits.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from plasticlab import philox
from plasticlab.rng import derive_seed

# (width, counter words, key words, output words), Random123's tests/kat_vectors.
KNOWN_ANSWERS = [
    (32, [0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    (32, [0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (32, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
    (64, [0] * 4, [0] * 2,
     [0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B]),
    (64, [2**64 - 1] * 4, [2**64 - 1] * 2,
     [0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0]),
    (64, [0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89],
     [0x452821E638D01377, 0xBE5466CF34E90C6C],
     [0xA528F45403E61D95, 0x38C72DBD566E9788, 0xA5A1610E72FD18B5, 0x57BD43B5E52B7FE6]),
]

# Philox's round multipliers and key increments by word width (the paper's Table 2 and
# Random123's PHILOX_M4xW, PHILOX_WW constants).
CONSTANTS = {32: ((0xD2511F53, 0xCD9E8D57), (0x9E3779B9, 0xBB67AE85)),
             64: ((0xD2E7470EE14C6C93, 0xCA5A826395121157), (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B))}


def reference(counter: list[int], key: list[int], width: int, rounds: int = 10) -> list[int]:
    """Philox-4x``width``-``rounds`` of one counter under one key, in plain Python integers."""
    (m0, m1), (w0, w1) = CONSTANTS[width]
    mask = (1 << width) - 1
    x0, x1, x2, x3 = counter
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + w0) & mask, (k1 + w1) & mask
        p0, p1 = m0 * x0, m1 * x2
        x0, x1, x2, x3 = (p1 >> width) ^ x1 ^ k0, p1 & mask, (p0 >> width) ^ x3 ^ k1, p0 & mask
    return [x0, x1, x2, x3]


def words_of(value: int, count: int, width: int) -> list[int]:
    """``value`` as ``count`` words of ``width`` bits, the least significant first (NumPy's
    ``int_to_array``)."""
    return [(value >> (width * i)) & ((1 << width) - 1) for i in range(count)]


def numpy_raw(key: int, counter: int, blocks: int) -> list[int]:
    """What ``numpy.random.Philox(key=key, counter=counter).random_raw(4 * blocks)`` returns,
    from :func:`reference` and NumPy's mapping: the key and counter split into 64-bit words, the
    least significant first; each block increments the 256-bit counter (carrying into the next
    word) **before** it is used; the four output words of a block come in word order."""
    out = []
    for b in range(1, blocks + 1):
        out += reference(words_of((counter + b) % 2**256, 4, 64), words_of(key, 2, 64), 64)
    return out


@pytest.mark.parametrize("width,counter,key,expected", KNOWN_ANSWERS)
def test_the_reference_gives_random123s_known_answers(width, counter, key, expected):
    assert reference(counter, key, width) == expected


@pytest.mark.parametrize("key,counter", [
    (0, 0), (1, 2**64 - 1),  # the second block carries into counter word 1
    (2**128 - 1, 2**128 - 2),  # carries into word 2 after one block
    (0x243F6A8885A308D313198A2E03707344, 2**192 - 3),  # carries into word 3 after two blocks
    (12345, 2**256 - 2),  # wraps to 0 after one block
    (2**64, 0xDEADBEEF << 96),  # key word 1 alone
])
def test_the_reference_at_64_bits_is_numpys_philox_bit_for_bit(key, counter):
    raw = np.random.Philox(key=key, counter=counter).random_raw(4 * 3)
    assert [int(v) for v in raw] == numpy_raw(key, counter, 3)


def test_numpys_counter_and_key_are_the_words_of_their_integers():
    state = np.random.Philox(key=2**64 + 5, counter=3 * 2**128 + 7).state["state"]
    assert state["counter"].tolist() == [7, 0, 3, 0] and state["key"].tolist() == [5, 1]


@pytest.mark.parametrize("counter,key,expected", [a[1:] for a in KNOWN_ANSWERS if a[0] == 32])
def test_philox_4x32_gives_random123s_known_answers(counter, key, expected):
    assert philox.philox_4x32(torch.tensor(key), torch.tensor(counter)).tolist() == expected


def test_philox_4x32_is_the_reference_for_any_batch_of_keys_and_counters():
    rng = random.Random(0)
    edges = [0, 1, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
    counters = [[rng.choice(edges) if rng.random() < 0.3 else rng.getrandbits(32) for _ in range(4)]
                for _ in range(300)]
    keys = [[rng.choice(edges) if rng.random() < 0.3 else rng.getrandbits(32) for _ in range(2)]
            for _ in range(300)]
    # counter (2³² − 1, 0, …) and (0, 1, …): the block after the low word carries.
    counters[:2], keys[:2] = [[2**32 - 1, 0, 7, 0], [0, 1, 7, 0]], [[5, 6], [5, 6]]
    out = philox.philox_4x32(torch.tensor(keys), torch.tensor(counters))
    assert out.dtype == torch.int64 and out.shape == (300, 4)
    assert out.tolist() == [reference(c, k, 32) for c, k in zip(counters, keys, strict=True)]
    # one key against a batch of counters, [3, 1, 2] keys against [4, 4] counters: broadcast
    one = philox.philox_4x32(torch.tensor(keys[0]), torch.tensor(counters[:10]))
    assert one.tolist() == [reference(c, keys[0], 32) for c in counters[:10]]
    grid = philox.philox_4x32(torch.tensor(keys[:3])[:, None], torch.tensor(counters[:4]))
    assert grid.shape == (3, 4, 4)
    assert grid[2, 3].tolist() == reference(counters[3], keys[2], 32)


def test_philox_4x32_refuses_words_outside_32_bits_and_wrong_shapes():
    with pytest.raises(ValueError, match="2\\*\\*32"):
        philox.philox_4x32(torch.tensor([0, 2**32]), torch.tensor([0, 0, 0, 0]))
    with pytest.raises(ValueError, match="2\\*\\*32"):
        philox.philox_4x32(torch.tensor([0, 0]), torch.tensor([0, 0, -1, 0]))
    with pytest.raises(ValueError, match="key"):
        philox.philox_4x32(torch.tensor([0, 0, 0]), torch.tensor([0, 0, 0, 0]))


def test_a_key_is_the_seeds_derived_seed_split_in_two_words_and_stays_as_it_is():
    for seed, stream in [(0, "shrink_perturb"), (7, "cbp"), (2**40, "x")]:
        key = derive_seed(seed, stream)
        assert philox.stream_key(seed, stream) == (key & 0xFFFFFFFF, key >> 32)
    keys = philox.member_keys([0, 1], "pin")
    assert keys.dtype == torch.int64 and keys.tolist() == [[1524062702, 841806095],
                                                           [2260324863, 897972733]]
    # The numbers a recorded run draws: they must never move.
    assert philox.random_words(keys[:1], 0, 6)[0].tolist() == [
        0xE27430FB, 0x62D9451B, 0x04D30B32, 0xC6A3CD0D, 0x141FC51D, 0x23B1BEC6]


@pytest.mark.parametrize("step", [0, 5, 2**32 - 1, 2**32, 2**64 - 1])
def test_element_n_of_step_t_is_word_n_mod_4_of_block_n_div_4(step):
    keys = philox.member_keys([3, 9], "layout")
    words = philox.random_words(keys, step, 11)
    assert words.shape == (2, 11)
    for k in range(2):
        key = keys[k].tolist()
        expected = [w for b in range(3)
                    for w in reference([b, 0, step & 0xFFFFFFFF, step >> 32], key, 32)]
        assert words[k].tolist() == expected[:11]


def test_a_step_may_be_a_tensor_and_must_lie_in_64_bits():
    keys = philox.member_keys([1], "s")
    assert torch.equal(philox.random_words(keys, torch.tensor(2**33 + 4), 8),
                       philox.random_words(keys, 2**33 + 4, 8))
    with pytest.raises(ValueError, match="step"):
        philox.random_words(keys, 2**64, 4)
    with pytest.raises(ValueError, match="step"):
        philox.random_words(keys, -1, 4)
    with pytest.raises(ValueError, match="keys"):
        philox.random_words(keys[0], 0, 4)


SEEDS = [0, 3, 7, 11, 42]


@pytest.mark.parametrize("draw", ["words", "uniform", "normal"])
def test_member_k_of_five_is_seed_k_alone_bit_for_bit(draw):
    # 300,001 elements: more blocks than one CPU piece holds, for one member as for five, and a
    # last block only partly used.
    shape = (3, 100_000 + 1) if draw != "words" else (300_001,)
    fn = {"words": lambda keys: philox.random_words(keys, 17, shape[0]),
          "uniform": lambda keys: philox.uniform(keys, 17, shape, low=-2.0, high=3.0),
          "normal": lambda keys: philox.normal(keys, 17, shape)}[draw]
    together = fn(philox.member_keys(SEEDS, "independence"))
    assert together.shape[0] == 5
    for k, seed in enumerate(SEEDS):
        assert torch.equal(together[k], fn(philox.member_keys([seed], "independence"))[0])


@pytest.mark.parametrize("pieces", [False, True], ids=["one piece", "pieces across streams"])
def test_several_streams_drawn_at_once_are_each_stream_drawn_alone_bit_for_bit(monkeypatch, pieces):
    if pieces:  # pieces of 5 blocks per member: boundaries inside and between the streams
        monkeypatch.setitem(philox._PIECE_COUNTERS, "cpu", 3 * 5)
    names, shapes = ["w0", "b0", "w1"], [(7, 9), (7,), (2, 3, 5)]
    keys = torch.stack([philox.member_keys([4, 5, 6], name) for name in names], dim=1)
    step = torch.tensor(2**32 + 9)
    together = philox.uniform_streams(keys, step, shapes, low=-1.0, high=1.0)
    normals = philox.normal_streams(keys, step, shapes)
    for s, shape in enumerate(shapes):
        assert torch.equal(together[s], philox.uniform(keys[:, s], step, shape, low=-1.0, high=1.0))
        assert torch.equal(normals[s], philox.normal(keys[:, s], step, shape))
    with pytest.raises(ValueError, match=r"need keys \[K, 2, 2\] for 2 streams"):
        philox.uniform_streams(keys, 0, shapes[:2])


def test_steps_streams_and_seeds_draw_different_numbers():
    keys = philox.member_keys(SEEDS, "a")
    base = philox.random_words(keys, 0, 4000)
    others = [philox.random_words(keys, 1, 4000), philox.random_words(keys, 2**32, 4000),
              philox.random_words(philox.member_keys(SEEDS, "b"), 0, 4000)]
    for other in others:
        assert (other == base).float().mean() < 1e-3
    assert (base[0] == base[1]).float().mean() < 1e-3
    assert len(set(philox.member_keys(range(1000), "a")[:, 0].tolist())) == 1000


def test_the_uniform_transforms_on_given_words():
    words = torch.tensor([0, 0xFF, 0x100, 0x80000000, 0xFFFFFFFF])
    assert philox.to_uniform(words).tolist() == [0.0, 0.0, 2.0**-24, 0.5, 1 - 2.0**-24]
    assert philox.to_uniform_positive(words).tolist() == [2.0**-24, 2.0**-24, 2.0**-23,
                                                          0.5 + 2.0**-24, 1.0]
    assert philox.to_uniform(words).dtype == torch.float32


def test_uniform_on_an_interval_is_low_plus_width_times_u():
    keys = philox.member_keys([4, 5], "interval")
    u = philox.uniform(keys, 3, (7, 9))
    assert u.shape == (2, 7, 9) and u.dtype == torch.float32
    assert torch.equal(u.reshape(2, -1), philox.to_uniform(philox.random_words(keys, 3, 63)))
    v = philox.uniform(keys, 3, (7, 9), low=-1.0, high=1.0)
    assert torch.equal(v, u * 2 - 1)  # exact: 2u and 2u − 1 are floats
    assert float(philox.to_uniform(torch.tensor([0xFFFFFFFF])) * 2 - 1) == 1 - 2.0**-23


def _float32(x: float) -> float:
    return float(np.float32(x))


def test_box_muller_on_given_words():
    r = math.sqrt(2 * math.log(2))  # u₁ = 0.5
    half = 0x7FFFFFFF
    cases = {(0xFFFFFFFF, 12345): (0.0, 0.0),  # u₁ = 1: r = 0
             (half, 0): (r, 0.0), (half, 2**30): (0.0, r),  # θ = 0, π/2
             (half, 2**31): (-r, 0.0), (half, 3 * 2**30): (0.0, -r),  # θ = π, 3π/2
             (half, 2**29): (r * math.sqrt(0.5), r * math.sqrt(0.5)),  # θ = π/4
             (0, 0): (math.sqrt(64 * math.log(2)), 0.0)}  # u₁ = 2⁻³²: the largest |z|
    x0, x1 = torch.tensor([c[0] for c in cases]), torch.tensor([c[1] for c in cases])
    z0, z1 = philox.box_muller(x0, x1)
    assert z0.dtype == torch.float32
    assert list(zip(z0.tolist(), z1.tolist(), strict=True)) == [
        (_float32(a), _float32(b)) for a, b in cases.values()]


def test_box_muller_is_the_formula_in_float64_rounded_to_float32():
    rng = np.random.default_rng(0)
    x0, x1 = (rng.integers(0, 2**32, 200_000, dtype=np.int64) for _ in range(2))
    r = np.sqrt(-2 * np.log((x0 + 1) * 2.0**-32))
    theta = 2 * np.pi * (x1 * 2.0**-32)
    z0, z1 = philox.box_muller(torch.from_numpy(x0), torch.from_numpy(x1))
    for ours, exact in ((z0.numpy(), r * np.cos(theta)), (z1.numpy(), r * np.sin(theta))):
        ulps = np.abs(ours.view(np.int32).astype(np.int64) - exact.astype(np.float32).view(np.int32))
        assert ulps.max() <= 1 and (ulps > 0).mean() < 1e-3


def test_the_series_for_ln_cos_and_sin_are_accurate_in_float64():
    rng = np.random.default_rng(1)
    k = np.concatenate([rng.integers(1, 2**32 + 1, 100_000), [1, 2, 3, 2**31, 2**32 - 1, 2**32]])
    ln = philox._ln_unit(torch.from_numpy(k), 32).numpy()
    exact = np.log(k * 2.0**-32)
    assert np.all(np.abs(ln - exact) <= 4e-16 * np.maximum(np.abs(exact), 1e-3))
    assert ln[-1] == 0.0
    j = np.concatenate([rng.integers(0, 2**32, 100_000), np.arange(0, 2**32, 2**28)])
    cos, sin = philox._cos_sin_turns(torch.from_numpy(j), 32)
    theta = 2 * np.pi * (j * 2.0**-32)
    assert np.abs(cos.numpy() - np.cos(theta)).max() < 2e-15
    assert np.abs(sin.numpy() - np.sin(theta)).max() < 2e-15


def _ks(sample: torch.Tensor, cdf) -> float:
    """The Kolmogorov–Smirnov distance between ``sample``'s empirical CDF and ``cdf``."""
    x = sample.double().flatten().sort().values
    n = len(x)
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum(i / n - f, f - (i - 1) / n).max())


N = 1_000_000
# 1.95/√n: the KS distance a true sample passes with probability 0.999.
KS_BOUND = 1.95 / math.sqrt(N)


def test_a_million_uniforms_have_the_uniform_distribution():
    u = philox.uniform(philox.member_keys([0, 1], "distribution"), 0, (N // 2,)).flatten()
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    se = math.sqrt(1 / 12 / N)
    assert abs(float(u.double().mean()) - 0.5) < 5 * se
    assert abs(float(u.double().var()) - 1 / 12) < 5 * math.sqrt(1 / 180 / N)
    assert _ks(u, lambda x: x) < KS_BOUND


def test_a_million_normals_have_the_standard_normal_distribution():
    z = philox.normal(philox.member_keys([0, 1], "distribution"), 0, (N // 2,)).double()
    flat = z.flatten()
    assert abs(float(flat.mean())) < 5 / math.sqrt(N)
    assert abs(float(flat.var()) - 1) < 5 * math.sqrt(2 / N)
    assert abs(float((flat**4).mean()) - 3) < 5 * math.sqrt(96 / N)
    assert _ks(flat, lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2)))) < KS_BOUND
    # the cos and sin terms of one pair are uncorrelated
    pairs = z.reshape(2, -1, 2, 2)
    assert abs(float((pairs[..., 0] * pairs[..., 1]).mean())) < 5 / math.sqrt(N / 2)


@pytest.mark.cuda
def test_cpu_and_cuda_draw_the_same_bits():
    keys = philox.member_keys(SEEDS, "devices")
    draws = (lambda step, d: philox.random_words(keys, step, 1_000_003, d),
             lambda step, d: philox.uniform(keys, step, (1000, 1001), d, low=-0.5, high=0.25),
             lambda step, d: philox.normal(keys, step, (1000, 1001), d))
    for step in (0, 2**40 + 3):
        for draw in draws:
            cpu, cuda = draw(step, "cpu"), draw(step, "cuda")
            assert cuda.device.type == "cuda"
            assert torch.equal(cpu, cuda.cpu())
