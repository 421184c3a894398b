"""Philox-4x32-10, a counter-based generator drawn on the device for every member at once.

Philox-4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC 2011; the ``philox4x32_10`` of their Random123 library) maps a **key** of two 32-bit words
and a **counter** of four 32-bit words to four 32-bit words. Nothing is carried from one draw to
the next: a draw is a pure function of (key, counter), so the draws of K members, of every
element, are one batch of tensor operations on whatever device the keys are on, with the same
bits on the CPU and on CUDA. :func:`philox_4x32` is the generator itself, vectorised over any
batch of (key, counter) pairs; words are held in int64 tensors with values in [0, 2³²).

Keys and counters (a member's stream)
-------------------------------------
Member k's stream is keyed by its run's seed and a stream name, as :mod:`plasticlab.rng` keys
its generators::

    key64 = rng.derive_seed(seed, stream)        # 63 bits: SeedSequence([seed, crc32(stream)])
    key   = (key64 mod 2³², key64 >> 32)         # (key word 0, key word 1)

and counted by (step, block)::

    counter = (b mod 2³², b >> 32, t mod 2³², t >> 32)   # words 0, 1, 2, 3

where t is the step (any integer in [0, 2⁶⁴)) and b = ⌊n / 4⌋ the block of element n of that
step's draw: element n is word n mod 4 of Philox(key, counter). A draw of N elements at step t
uses the counters of blocks 0 … ⌈N/4⌉ − 1 of step t, so no two steps and no two elements share a
counter under one key (and each (seed, stream) has a key of its own), and member k's numbers
depend only on (seed k, stream, t, n) — never on K or on the other members.

Transforms (words → floats)
---------------------------
- :func:`to_uniform`: u = (x >> 8) · 2⁻²⁴, float32 in [0, 1) (the 24 high bits; exact).
- :func:`to_uniform_positive`: u = ((x >> 8) + 1) · 2⁻²⁴, float32 in (0, 1] (exact).
- :func:`uniform` in [a, b): a + (b − a) · u, two float32 operations (b − a and a rounded to
  float32 first); it stays ≥ a, and can round up to b only where (b − a) · u does.
- :func:`box_muller`, standard normal: from two words x₀, x₁ (all 32 bits of each),

      u₁ = (x₀ + 1) · 2⁻³² ∈ (0, 1],   θ = 2π · x₁ · 2⁻³² ∈ [0, 2π),
      r  = √(−2 ln u₁),   z₀ = r cos θ,   z₁ = r sin θ,

  computed in float64 and rounded once to float32. log never sees 0 (u₁ ≥ 2⁻³²), so |z| ≤
  √(64 ln 2) ≈ 6.66. :func:`normal` takes element 4b, 4b+1 from words (0, 1) of block b and
  elements 4b+2, 4b+3 from words (2, 3).

Same bits everywhere
--------------------
Every operation here is an integer operation or one of + − × ÷ √ in IEEE arithmetic, which
the CPU and CUDA kernels round alike (correctly), in a vector loop's body as in its scalar
tail. ln, cos and sin are not: libm's and CUDA's differ in the last bit, and so do torch's
vectorised and scalar CPU forms (which is how a member's numbers would come to depend on
where it sits in a ``[K, …]`` tensor; docs/member-independence.md). So :func:`box_muller`
computes them itself from + − × ÷ (:func:`_ln_unit`, :func:`_cos_sin_turns`): series in
float64, accurate to a few units of 2⁻⁵³, the same bits on any device and at any position
(``tests/test_philox.py`` compares CUDA with the CPU wherever a GPU is present).

Shrink & Perturb's noise, L2 Init + Resample's target (:mod:`plasticlab.methods.init_draws`;
every layer in one draw, :func:`uniform_streams`), ReDo's, CBP's and SNR's new units' weights,
the resets' fresh draws and UPGD's noise (:mod:`plasticlab.optim.upgd`) are drawn from it with
``draws="philox"`` (:func:`draws_param`); by default they still draw from per-member
generators: moving them changes their numbers once (docs/member-independence.md, "Draws on the
device: Philox").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .params import Param
from .rng import derive_seed

MASK32 = 0xFFFFFFFF
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
"""The round multipliers of Philox-4x32 (Random123's PHILOX_M4x32_0, _1)."""
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
"""The key schedule's Weyl increments of Philox-4x32 (PHILOX_W32_0, _1: the golden ratio and
√3 − 1, times 2³²)."""
ROUNDS = 10

_LN2 = math.log(2.0)
_SQRT_HALF = math.sqrt(0.5)
# ln m = 2 atanh s, s = (m − 1)/(m + 1), |s| ≤ 3 − 2√2 ≈ 0.1716 on m ∈ [√½, √2): the terms to
# s²¹/21 leave a relative error below 1e-18.
_ATANH_COEFFS = tuple(1.0 / (2 * i + 1) for i in range(11))
# sin t, cos t on |t| ≤ π/4: the Taylor terms to t²¹/21! and t²⁰/20! leave less than 1e-19.
_SIN_COEFFS = tuple((-1) ** i / math.factorial(2 * i + 1) for i in range(11))
_COS_COEFFS = tuple((-1) ** i / math.factorial(2 * i) for i in range(11))


DRAWS = ("generator", "philox")
"""Where a method's or an optimizer's random draws during training come from (its ``draws``
parameter): each member's torch generator (``generator``), or this module on the device
(``philox``)."""


def draws_param(what: str) -> Param:
    """The ``draws`` hyper-parameter of something that draws ``what`` during training:
    ``generator`` (each member's torch generator, member by member) or ``philox`` (this module,
    on the device, for every member at once, counted by step). Added after runs were recorded,
    it is left out of a run's configuration at its default, so those runs keep their ids
    (``implicit_default``)."""
    return Param("draws", "generator", str, f"where {what} comes from: generator (each member's "
                 "torch generator) or philox (Philox-4x32-10 on the device, counted by step)",
                 choices=DRAWS, implicit_default=True)


def _mulhilo(m: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high word, low word) of the 64-bit product m·x of two 32-bit words."""
    # m·x can reach 2⁶⁴ and int64 holds 2⁶³ (torch's uint64 has no shifts or adds), and an
    # overflowing int64 product is undefined in C++: multiply x by m's two 16-bit halves apart,
    # so that no product passes 2⁴⁸, and add them up.
    low = x * (m & 0xFFFF)
    high = x * (m >> 16)
    low += (high & 0xFFFF).bitwise_left_shift_(16)
    high.bitwise_right_shift_(16)
    high += low >> 32
    return high, low.bitwise_and_(MASK32)


def _rounds(k0, k1, x0, x1, x2, x3, rounds: int = ROUNDS) -> list[torch.Tensor]:
    """The four output words of Philox-4x32-``rounds`` for key (k0, k1) and counter (x0 … x3),
    all broadcast together (int64 tensors holding 32-bit words)."""
    # Every word at the full batch shape from the start, so that each round can write in place.
    x0, x1, x2, x3 = torch.broadcast_tensors(x0, x1, x2, x3, k0, k1)[:4]
    for r in range(rounds):
        # Random123's key schedule: round r uses key + r·W (mod 2³²).
        r0, r1 = (k0 + r * PHILOX_W[0]) & MASK32, (k1 + r * PHILOX_W[1]) & MASK32
        hi0, lo0 = _mulhilo(PHILOX_M[0], x0)
        hi1, lo1 = _mulhilo(PHILOX_M[1], x2)
        hi1.bitwise_xor_(x1).bitwise_xor_(r0)
        hi0.bitwise_xor_(x3).bitwise_xor_(r1)
        x0, x1, x2, x3 = hi1, lo1, hi0, lo0
    return [x0, x1, x2, x3]


def philox_4x32(key: torch.Tensor, counter: torch.Tensor, rounds: int = ROUNDS) -> torch.Tensor:
    """Philox-4x32-``rounds`` (10 by default): ``key`` ``[..., 2]`` and ``counter`` ``[..., 4]``
    (integer tensors of 32-bit words, word 0 first, broadcast against each other) → the four
    output words ``[..., 4]`` (int64, each in [0, 2³²)), Random123's ``philox4x32_R``."""
    if key.shape[-1] != 2 or counter.shape[-1] != 4:
        raise ValueError(f"need key [..., 2] and counter [..., 4], got {tuple(key.shape)} and "
                         f"{tuple(counter.shape)}")
    key, counter = key.to(torch.int64), counter.to(torch.int64)
    if bool(((key < 0) | (key > MASK32)).any()) or bool(((counter < 0) | (counter > MASK32)).any()):
        raise ValueError("key and counter words must lie in [0, 2**32)")
    return torch.stack(_rounds(*key.unbind(-1), *counter.unbind(-1), rounds=rounds), dim=-1)


def stream_key(seed: int, stream: str) -> tuple[int, int]:
    """The Philox key (word 0, word 1) of stream ``stream`` of run ``seed``: the 63-bit
    ``rng.derive_seed(seed, stream)`` split into its low and high 32 bits."""
    key = derive_seed(seed, stream)
    return key & MASK32, key >> 32


def member_keys(seeds: Sequence[int], stream: str, device: str | torch.device = "cpu") -> torch.Tensor:
    """Every member's Philox key for stream ``stream``, ``[K, 2]`` int64 on ``device``: row k is
    :func:`stream_key` of ``seeds[k]``."""
    return torch.tensor([stream_key(s, stream) for s in seeds], dtype=torch.int64, device=device)


def _step_words(step, device) -> tuple:
    """Counter words 2 and 3 of step ``step`` (an int in [0, 2⁶⁴) or an int64 tensor ≥ 0)."""
    if isinstance(step, torch.Tensor):
        step = step.to(device=device, dtype=torch.int64)
        return step & MASK32, step >> 32
    step = int(step)
    if not 0 <= step < 2**64:
        raise ValueError(f"step must lie in [0, 2**64), got {step}")
    return (torch.tensor(step & MASK32, device=device), torch.tensor(step >> 32, device=device))


_PIECE_COUNTERS = {"cpu": 1 << 16}
"""How many counters (members × blocks) one piece of a draw holds, by device type: on the CPU
a piece's temporaries stay in cache (2–3× faster than the whole draw at once, for K ≥ 32);
elsewhere :data:`_DEVICE_PIECE_COUNTERS`, which bounds the memory a draw takes. A counter's
words do not depend on which others are drawn with it, so the bits are the same either way."""
_DEVICE_PIECE_COUNTERS = 1 << 22


def _draw(keys: torch.Tensor, step, numel: int, device, transform, dtype: torch.dtype) -> torch.Tensor:
    """``transform`` of the words of blocks 0 … ⌈numel/4⌉ − 1 of step ``step`` of every
    member's stream, ``[K, numel]``: the blocks are drawn piece by piece, ``transform`` taking
    a piece's words ``[K, blocks, 4]`` to as many values of ``dtype``."""
    if keys.dim() != 2 or keys.shape[-1] != 2:
        raise ValueError(f"need keys [K, 2], got {tuple(keys.shape)}")
    return _draw_streams(keys[:, None], step, [numel], device, transform, dtype)[0]


def _draw_streams(keys: torch.Tensor, step, numels: Sequence[int], device, transform,
                  dtype: torch.dtype) -> list[torch.Tensor]:
    """:func:`_draw` of several streams at once: ``keys`` ``[K, S, 2]`` (member k's stream s is
    keyed ``keys[k, s]``) and ``numels[s]`` elements of stream s, → S tensors ``[K, numels[s]]``.
    A counter's words depend on its key and counter alone, so these are the S draws' values to
    the bit, from one batch of rounds over every stream's blocks: one sequence of kernels where
    S were (and one graph to compile)."""
    device = keys.device if device is None else torch.device(device)
    keys = keys.to(device=device, dtype=torch.int64)
    if keys.dim() != 3 or keys.shape[2] != 2 or keys.shape[1] != len(numels):
        raise ValueError(f"need keys [K, {len(numels)}, 2] for {len(numels)} streams, got "
                         f"{tuple(keys.shape)}")
    members = len(keys)
    blocks = [(int(n) + 3) // 4 for n in numels]
    total = sum(blocks)
    # each block of the batch: its stream, and its number within that stream
    if len(blocks) == 1:
        stream_of = None  # one stream: its key broadcasts over the blocks
        block_of = torch.arange(total, device=device, dtype=torch.int64)
    else:
        stream_of = torch.cat([torch.full((b,), s, device=device, dtype=torch.int64)
                               for s, b in enumerate(blocks)])
        block_of = torch.cat([torch.arange(b, device=device, dtype=torch.int64) for b in blocks])
    t0, t1 = _step_words(step, device)
    # compiled (torch.compile traces this), one piece: inductor fuses the rounds, and each
    # piece would be another copy of them to compile
    piece = total if torch.compiler.is_compiling() else max(
        1, _PIECE_COUNTERS.get(device.type, _DEVICE_PIECE_COUNTERS) // max(1, members))
    out = torch.empty(members, total, 4, dtype=dtype, device=device)
    for start in range(0, total, piece):
        b = block_of[None, start:start + piece]
        k = keys[:, :1] if stream_of is None else keys[:, stream_of[start:start + piece]]
        words = _rounds(k[..., 0], k[..., 1], b & MASK32, b >> 32, t0, t1)
        out[:, start:start + piece] = transform(torch.stack(words, dim=-1))
    flat = out.reshape(members, -1)
    firsts = [0]
    for b in blocks[:-1]:
        firsts.append(firsts[-1] + 4 * b)
    return [flat[:, first:first + int(n)] for first, n in zip(firsts, numels, strict=True)]


def random_words(keys: torch.Tensor, step, numel: int, device=None) -> torch.Tensor:
    """The first ``numel`` 32-bit words of step ``step`` of each member's stream, ``[K, numel]``
    int64: element n of row k is word n mod 4 of Philox(keys[k], (⌊n/4⌋ mod 2³², ⌊n/4⌋ >> 32,
    step mod 2³², step >> 32)). On ``device`` (default: the keys')."""
    return _draw(keys, step, numel, device, lambda words: words, torch.int64)


def to_uniform(words: torch.Tensor) -> torch.Tensor:
    """(x >> 8) · 2⁻²⁴ for each 32-bit word x: float32 uniform on [0, 1), exact."""
    return (words >> 8).to(torch.float32).mul_(2.0**-24)


def to_uniform_positive(words: torch.Tensor) -> torch.Tensor:
    """((x >> 8) + 1) · 2⁻²⁴ for each 32-bit word x: float32 uniform on (0, 1], exact."""
    return ((words >> 8) + 1).to(torch.float32).mul_(2.0**-24)


def _ln_unit(k: torch.Tensor, bits: int) -> torch.Tensor:
    """ln(k · 2⁻ᵇⁱᵗˢ) in float64 for integers k in [1, 2ᵇⁱᵗˢ], from + − × ÷ only."""
    # k = m·2ᵉ exactly (frexp), m moved into [√½, √2); ln(k·2⁻ᵇ) = (e − b)·ln 2 + 2 atanh s.
    m, e = torch.frexp(k.to(torch.float64))
    low = m < _SQRT_HALF
    m = torch.where(low, m * 2.0, m)
    e = (e - low.to(e.dtype) - bits).to(torch.float64)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    series = torch.full_like(s, _ATANH_COEFFS[-1])
    for c in reversed(_ATANH_COEFFS[:-1]):
        series = series * s2 + c
    return e * _LN2 + (s + s) * series


def _cos_sin_turns(j: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos θ, sin θ) in float64 for θ = 2π · j · 2⁻ᵇⁱᵗˢ, integers j in [0, 2ᵇⁱᵗˢ), from + − ×."""
    # The quadrant comes exactly from j's top two bits; the rest, moved into [−⅛, ⅛) of a turn,
    # is t ∈ [−π/4, π/4), where the Taylor series converge fast.
    quarter = 1 << (bits - 2)
    rest = j & (quarter - 1)
    over = rest >= quarter // 2
    quadrant = ((j >> (bits - 2)) + over) & 3
    t = (rest - over * quarter).to(torch.float64) * (math.pi * 2.0 ** (1 - bits))
    t2 = t * t
    sin, cos = torch.full_like(t, _SIN_COEFFS[-1]), torch.full_like(t, _COS_COEFFS[-1])
    for cs, cc in zip(reversed(_SIN_COEFFS[:-1]), reversed(_COS_COEFFS[:-1]), strict=True):
        sin, cos = sin * t2 + cs, cos * t2 + cc
    sin = sin * t
    # θ = quadrant·π/2 + t: odd quadrants swap cos and sin; cos θ < 0 in quadrants 1, 2 and
    # sin θ < 0 in 2, 3.
    odd = (quadrant & 1).bool()
    cos, sin = torch.where(odd, sin, cos), torch.where(odd, cos, sin)
    cos = torch.where((quadrant == 1) | (quadrant == 2), -cos, cos)
    sin = torch.where(quadrant >= 2, -sin, sin)
    return cos, sin


def box_muller(x0: torch.Tensor, x1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two standard normals (z₀, z₁) in float32 from two 32-bit words: u₁ = (x₀ + 1)·2⁻³² ∈
    (0, 1], θ = 2π·x₁·2⁻³², r = √(−2 ln u₁), z₀ = r cos θ, z₁ = r sin θ, in float64 (ln, cos,
    sin from + − × ÷ only: the same bits on any device), rounded once to float32."""
    r = torch.sqrt(_ln_unit(x0 + 1, 32) * -2.0)
    cos, sin = _cos_sin_turns(x1, 32)
    return (r * cos).to(torch.float32), (r * sin).to(torch.float32)


def _numel(shape: Sequence[int]) -> int:
    return math.prod([int(s) for s in shape])


def uniform(keys: torch.Tensor, step, shape: Sequence[int], device=None, low: float = 0.0,
            high: float = 1.0) -> torch.Tensor:
    """Uniform float32 on [low, high), ``[K, *shape]`` on ``device`` (default: the keys'):
    member k's element n (row-major) is low + (high − low)·u, u = :func:`to_uniform` of word n
    of step ``step`` of its stream (:func:`random_words`). With the default [0, 1) it is u."""
    if keys.dim() != 2 or keys.shape[-1] != 2:
        raise ValueError(f"need keys [K, 2], got {tuple(keys.shape)}")
    return uniform_streams(keys[:, None], step, [shape], device, low, high)[0]


def uniform_streams(keys: torch.Tensor, step, shapes: Sequence[Sequence[int]], device=None,
                    low: float = 0.0, high: float = 1.0) -> list[torch.Tensor]:
    """:func:`uniform` of several streams in one draw (:func:`_draw_streams`): ``keys``
    ``[K, S, 2]``, stream s shaped ``shapes[s]`` → S tensors ``[K, *shapes[s]]``, each the
    values :func:`uniform` of ``keys[:, s]`` gives, to the bit."""
    shapes = [tuple([int(d) for d in shape]) for shape in shapes]
    drawn = _draw_streams(keys, step, [_numel(shape) for shape in shapes], device, to_uniform,
                          torch.float32)
    if (low, high) != (0.0, 1.0):
        drawn = [u.mul(float(high - low)).add_(float(low)) for u in drawn]
    return [u.reshape(len(keys), *shape) for u, shape in zip(drawn, shapes, strict=True)]


def _box_muller_block(words: torch.Tensor) -> torch.Tensor:
    """A block's four words → four normals: :func:`box_muller` of words (0, 1) and (2, 3)."""
    z0, z1 = box_muller(words[..., 0::2], words[..., 1::2])
    return torch.stack((z0, z1), dim=-1).reshape(words.shape)


def normal(keys: torch.Tensor, step, shape: Sequence[int], device=None) -> torch.Tensor:
    """Standard normal float32, ``[K, *shape]`` on ``device`` (default: the keys'): member k's
    elements 4b, 4b + 1 are :func:`box_muller` of words 4b, 4b + 1 of step ``step`` of its
    stream, and 4b + 2, 4b + 3 of words 4b + 2, 4b + 3 (the cos term first)."""
    if keys.dim() != 2 or keys.shape[-1] != 2:
        raise ValueError(f"need keys [K, 2], got {tuple(keys.shape)}")
    return normal_streams(keys[:, None], step, [shape], device)[0]


def normal_streams(keys: torch.Tensor, step, shapes: Sequence[Sequence[int]],
                   device=None) -> list[torch.Tensor]:
    """:func:`normal` of several streams in one draw (:func:`_draw_streams`), as
    :func:`uniform_streams` is :func:`uniform`'s."""
    shapes = [tuple([int(d) for d in shape]) for shape in shapes]
    drawn = _draw_streams(keys, step, [_numel(shape) for shape in shapes], device,
                          _box_muller_block, torch.float32)
    return [z.reshape(len(keys), *shape) for z, shape in zip(drawn, shapes, strict=True)]
