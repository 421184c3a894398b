"""Tests of plasticlab.problems: each problem's stream matches SPEC §3.

Permuted MNIST and the random-label problems run on the real data (MNIST, the CIFAR-10 subset)
found through $PLASTICLAB_DATA, else <repo>/../shared/data; those tests skip, saying so, when
the data is not found. 5+1 CIFAR and Continual ImageNet run on small files in the official
layouts (CIFAR-100 python pickles, Dohare et al.'s per-class ImageNet-32 .npy files) that the
tests write themselves, with images that encode their class and index so that every batch can
be traced back to the file it came from.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import CIFAR100_TEST_PER_CLASS, CIFAR100_TRAIN_PER_CLASS, needs_data
from plasticlab.data import load_cifar10, load_mnist
from plasticlab.problems import (
    PROBLEMS,
    ContinualImageNet,
    FivePlusOneCIFAR,
    PermutedMNIST,
    Problem,
    RandomLabelCIFAR,
    RandomLabelMNIST,
    TaskData,
    get_problem,
)
from plasticlab.problems.task_examples import TaskExamples

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.247, 0.243, 0.261)


# --------------------------------------------------------------------------- data fixtures


# Small but valid settings per problem (the fake data sets are small).
SMALL = {
    "permuted_mnist": {},
    "random_label_mnist": {},
    "random_label_cifar": {},
    "five_plus_one_cifar": {"tasks": 6, "steps_per_task": 30, "batch_size": 10},
    "continual_imagenet": {"tasks": 3, "steps_per_task": 15, "batch_size": 20},
    "warm_start_mnist": {"steps_per_task": 30, "batch_size": 16, "train_examples": 2000},
    "warm_start_cifar": {"steps_per_task": 30, "batch_size": 16, "train_examples": 2000},
    "split_mnist": {"steps_per_task": 30, "examples_per_class": 100, "test_per_class": 20},
    "split_cifar": {"steps_per_task": 30, "examples_per_class": 100, "test_per_class": 20},
}
DATA_FIXTURE = {
    "permuted_mnist": "mnist_dir",
    "random_label_mnist": "mnist_dir",
    "random_label_cifar": "cifar10_dir",
    "five_plus_one_cifar": "cifar100_dir",
    "continual_imagenet": "imagenet_dir",
    "warm_start_mnist": "mnist_dir",
    "warm_start_cifar": "cifar10_dir",
    "split_mnist": "mnist_dir",
    "split_cifar": "cifar10_dir",
}


# Every classification problem (the regression's stream: tests/test_problems_slowly_changing_
# regression.py), skipped where the real data it is built from is missing.
WITH_DATA = [pytest.param(name, marks=needs_data(DATA_FIXTURE[name]))
             for name in sorted(PROBLEMS) if PROBLEMS[name].loss == "cross_entropy"]


def make(request, name: str, seeds, **overrides):
    data_dir = request.getfixturevalue(DATA_FIXTURE[name])
    return get_problem(name)(seeds, data_dir=data_dir, **{**SMALL[name], **overrides})


# --------------------------------------------------------------------------- helpers


def cifar_to_uint8(x: torch.Tensor) -> torch.Tensor:
    """Invert the SPEC's CIFAR normalisation: [..., 3, H, W] floats -> uint8 pixels."""
    mean = torch.tensor(CIFAR_MEAN, dtype=torch.float64).view(3, 1, 1)
    std = torch.tensor(CIFAR_STD, dtype=torch.float64).view(3, 1, 1)
    v = (x.double() * std + mean) * 255.0
    r = v.round()
    assert (v - r).abs().max() < 1e-3, "not an affine image of whole pixel values"
    return r.to(torch.uint8)


def mnist_to_uint8(x: torch.Tensor) -> torch.Tensor:
    """Invert the SPEC's MNIST scaling to [-1, 1]."""
    v = (x.double() + 1.0) * 127.5
    r = v.round()
    assert (v - r).abs().max() < 1e-3, "not an affine image of whole pixel values"
    return r.to(torch.uint8)


def row_keys(x: torch.Tensor) -> list[bytes]:
    """One bytes key per row of ``x`` (leading dim), for multiset comparisons."""
    a = x.contiguous().numpy().reshape(len(x), -1)
    return [r.tobytes() for r in a]


def pairs(x: torch.Tensor, y: torch.Tensor) -> Counter:
    return Counter(zip(row_keys(x), y.tolist(), strict=True))


def tensor_bytes(obj) -> int:
    """Bytes of the distinct tensor storages referenced by ``obj``'s attributes (one level of
    lists/tuples/dicts followed)."""
    seen, total = set(), 0

    def visit(v):
        nonlocal total
        if isinstance(v, torch.Tensor):
            s = v.untyped_storage()
            if s.data_ptr() not in seen:
                seen.add(s.data_ptr())
                total += s.nbytes()
        elif isinstance(v, (list, tuple)):
            for item in v:
                visit(item)
        elif isinstance(v, dict):
            for item in v.values():
                visit(item)

    for value in vars(obj).values():
        visit(value)
    return total


# --------------------------------------------------------------------------- registry and parameters


def test_registry_holds_the_five_spec_problems_and_the_fields_and_get_problem_rejects_unknown_names():
    assert set(PROBLEMS) == {"permuted_mnist", "random_label_mnist", "random_label_cifar",
                             "five_plus_one_cifar", "continual_imagenet",  # SPEC §3
                             "warm_start_mnist", "warm_start_cifar", "split_mnist", "split_cifar",
                             "slowly_changing_regression"}  # the field's (issue 47)
    for name, cls in PROBLEMS.items():
        assert get_problem(name) is cls
    with pytest.raises(ValueError, match="nope") as err:
        get_problem("nope")
    for name in PROBLEMS:
        assert name in str(err.value)


@pytest.mark.parametrize("name, table", [
    ("permuted_mnist", (500, 625, 16, "mlp", 10)),
    ("random_label_mnist", (50, 30_000, 16, "mlp", 10)),
    ("random_label_cifar", (50, 30_000, 16, "cnn", 10)),
    ("five_plus_one_cifar", (30, 780, 32, "cnn", 100)),
    ("continual_imagenet", (500, 120, 100, "cnn", 2)),
])
def test_defaults_match_the_spec_table(name, table):
    cls = get_problem(name)
    d = cls.defaults
    assert (d["tasks"], d["steps_per_task"], d["batch_size"], cls.arch, cls.num_outputs) == table
    assert cls.input_shape == ((784,) if cls.arch == "mlp" else (3, 32, 32))
    assert cls.has_test_sets == (name in ("permuted_mnist", "five_plus_one_cifar", "continual_imagenet"))


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_unknown_problem_parameter_is_a_value_error_listing_the_valid_ones(name):
    cls = get_problem(name)
    # Parameters are resolved before any data is read, so no data is needed here.
    with pytest.raises(ValueError, match="bogus") as err:
        cls([0], bogus=1)
    valid = [p.name for p in cls.parameters]
    assert valid
    for p in valid:
        assert p in str(err.value)


def test_problem_parameters_are_typed_and_seeds_and_sizes_validated():
    with pytest.raises(ValueError, match="identity_first_task"):
        PermutedMNIST([0], identity_first_task="maybe")
    with pytest.raises(ValueError, match="seed"):
        PermutedMNIST([])
    with pytest.raises(ValueError, match="batch_size"):
        PermutedMNIST([0], batch_size=0)


# --------------------------------------------------------------------------- the shared stream


class _Counting(Problem):
    """The same 103 examples (x = index, y = index % 3) for every seed and task."""

    name = "counting"
    description = "test stream"
    arch = "mlp"
    input_shape = (1,)
    num_outputs = 3
    defaults = {"tasks": 3, "steps_per_task": 50, "batch_size": 10}

    def member_task(self, member, seed, task):
        x = torch.arange(103, dtype=torch.uint8)[:, None]
        return TaskData(x, torch.arange(103) % 3)


def _order(p: Problem, member: int) -> list[int]:
    return torch.cat([p.batch(s)[0][member, :, 0] for s in range(p.steps_per_task)]).long().tolist()


def test_batch_order_is_seeded_per_seed_and_task_with_a_fresh_shuffle_each_epoch():
    p = _Counting([1, 2, 1])
    p.start_task(0)
    a, b, c = _order(p, 0), _order(p, 1), _order(p, 2)
    assert a == c and a != b  # the seed, not the member position, fixes the order
    # 103 examples in batches of 10: epochs of 10 batches, the last 3 examples dropped.
    epochs = [a[i:i + 100] for i in range(0, 500, 100)]
    for epoch in epochs:
        assert len(set(epoch)) == 100 and set(epoch) <= set(range(103))
    assert len({tuple(e) for e in epochs}) == 5, "epochs repeat the same order"
    x, y = p.batch(7)
    assert torch.equal(y, x[..., 0].long() % 3)  # labels travel with their examples
    p.start_task(1)
    assert _order(p, 0) != a  # and a new task reshuffles


# --------------------------------------------------------------------------- every problem


@pytest.mark.parametrize("name", WITH_DATA)
def test_batches_and_test_sets_have_spec_shapes_dtypes_labels_and_ranges(request, name):
    p = make(request, name, [3, 4])
    k, b = 2, p.batch_size
    for task in (0, 1):
        p.start_task(task)
        xs = []
        for step in (0, p.steps_per_task - 1):
            x, y = p.batch(step)
            assert x.shape == (k, b, *p.input_shape)
            assert x.dtype == torch.float32 and y.dtype == torch.int64
            assert y.shape == (k, b)
            assert int(y.min()) >= 0 and int(y.max()) < p.num_outputs
            xs.append(x)
        test = p.test_set()
        assert (test is not None) == p.has_test_sets
        if test is not None:
            tx, ty = test
            assert tx.dtype == torch.float32 and ty.dtype == torch.int64
            assert tx.shape[0] == k and tx.shape[2:] == p.input_shape and ty.shape == tx.shape[:2]
            assert int(ty.min()) >= 0 and int(ty.max()) < p.num_outputs
            xs.append(tx)
        for x in xs:
            if name.endswith("mnist"):
                assert float(x.min()) >= -1.0 and float(x.max()) <= 1.0
                mnist_to_uint8(x)  # exactly 2*v/255 - 1 for whole pixel values v
            elif name == "continual_imagenet":  # used as stored
                assert torch.equal(x, x.round()) and float(x.min()) >= 0 and float(x.max()) <= 255
            else:
                lo = torch.tensor([-m / s for m, s in zip(CIFAR_MEAN, CIFAR_STD, strict=True)])
                hi = torch.tensor([(1 - m) / s for m, s in zip(CIFAR_MEAN, CIFAR_STD, strict=True)])
                per_channel = x.transpose(0, 2).reshape(3, -1)
                assert (per_channel.min(1).values >= lo - 1e-5).all()
                assert (per_channel.max(1).values <= hi + 1e-5).all()
                cifar_to_uint8(x)  # exactly (v/255 - mean)/std for whole pixel values v
    with pytest.raises(ValueError, match="out of range"):
        p.start_task(p.tasks)


@pytest.mark.parametrize("name", WITH_DATA)
def test_same_seeds_give_identical_streams_in_two_problem_objects(request, name):
    a, b = make(request, name, [5, 6]), make(request, name, [5, 6])
    for task in (0, 1):
        a.start_task(task)
        b.start_task(task)
        for step in sorted({0, 1, a.steps_per_task // 2, a.steps_per_task - 1}):
            xa, ya = a.batch(step)
            xb, yb = b.batch(step)
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
        if a.has_test_sets:
            (txa, tya), (txb, tyb) = a.test_set(), b.test_set()
            assert torch.equal(txa, txb) and torch.equal(tya, tyb)


@pytest.mark.parametrize("name", WITH_DATA)
def test_ensemble_member_k_streams_exactly_what_its_seed_streams_alone(request, name):
    ensemble, alone = make(request, name, [11, 22, 33]), make(request, name, [22])
    for task in (0, 1):
        ensemble.start_task(task)
        alone.start_task(task)
        for step in sorted({0, 3, ensemble.steps_per_task - 1}):
            xe, ye = ensemble.batch(step)
            xa, ya = alone.batch(step)
            assert torch.equal(xe[1], xa[0]) and torch.equal(ye[1], ya[0])
            assert not torch.equal(xe[0], xe[1])  # and the members do differ
        if ensemble.has_test_sets:
            (txe, tye), (txa, tya) = ensemble.test_set(), alone.test_set()
            assert torch.equal(txe[1], txa[0]) and torch.equal(tye[1], tya[0])


@pytest.mark.parametrize("name", WITH_DATA)
def test_a_task_gathered_on_the_device_is_the_task_staged_on_the_host(request, name):
    # On a GPU a task's examples are taken from a resident copy of the data set; on the CPU they
    # are staged in a reused host buffer. The gather itself runs on any device: here, the CPU.
    # Both are fast forms (plasticlab.problems.task_examples) of the plain stack of each member's
    # permuted examples, and equal it to the bit.
    problem = make(request, name, [11, 22, 33])
    examples = TaskExamples(torch.device("cpu"))
    previous = None
    for task in (0, 1):
        parts = [problem.member_task(k, seed, task) for k, seed in enumerate(problem.seeds)]
        staged = examples.on_host(parts).clone()
        gathered = examples.on_device(parts, previous)
        plain = torch.stack([p.examples() if p.perm is None else p.examples()[:, p.perm] for p in parts])
        assert gathered.dtype == staged.dtype == plain.dtype
        assert torch.equal(gathered, staged) and torch.equal(staged, plain)
        previous = gathered  # the next task's gather reuses this buffer, as start_task does
    if name == "permuted_mnist":  # one resident copy of MNIST, whatever the task and member
        assert sorted(where for _, where in examples.resident) == ["device", "host"]
        assert all(x is problem.x_train for x, _ in examples.resident.values())


# --------------------------------------------------------------------------- Permuted MNIST


@pytest.fixture(scope="module")
def mnist(mnist_dir):
    ds = load_mnist(mnist_dir)
    x_train, x_test = ds.x_train.reshape(len(ds.x_train), -1), ds.x_test.reshape(len(ds.x_test), -1)
    return x_train, ds.y_train, x_test, ds.y_test


def test_permuted_mnist_permutations_are_valid_and_differ_per_task_and_per_seed(mnist_dir):
    p = PermutedMNIST([1, 2], data_dir=mnist_dir)
    perms = {}
    for seed in (1, 2):
        for task in (0, 1, 2):
            perm = p.member_task(0, seed, task).perm
            assert torch.equal(perm.sort().values, torch.arange(784))
            assert not torch.equal(perm, torch.arange(784))
            perms[seed, task] = perm
    keys = list(perms)
    for i, key_a in enumerate(keys):
        for key_b in keys[i + 1:]:
            assert (perms[key_a] != perms[key_b]).float().mean() > 0.9, (key_a, key_b)


def test_permuted_mnist_batch_is_the_raw_mnist_image_gathered_through_the_task_permutation(
        mnist_dir, mnist):
    x_train, y_train, _, _ = mnist
    label_of = {}
    for key, label in zip(row_keys(torch.from_numpy(np.array(x_train))), y_train.tolist(), strict=True):
        label_of.setdefault(key, set()).add(label)
    p = PermutedMNIST([7, 8], data_dir=mnist_dir)
    for task in (0, 3):
        p.start_task(task)
        for step in (0, 400):
            x, y = p.batch(step)
            for k, seed in enumerate(p.seeds):
                perm = p.member_task(k, seed, task).perm
                shown = mnist_to_uint8(x[k])
                raw = torch.empty_like(shown)
                raw[:, perm] = shown  # shown[:, j] == raw[:, perm[j]]
                assert not torch.equal(raw, shown)
                for key, label in zip(row_keys(raw), y[k].tolist(), strict=True):
                    assert label in label_of.get(key, ()), "batch row is not a permuted MNIST image"
                assert torch.equal(x[k], raw[:, perm].float() * (2 / 255) - 1)


def test_permuted_mnist_identity_first_task_shows_task_0_unpermuted(mnist_dir, mnist):
    x_train = torch.from_numpy(np.array(mnist[0]))
    train_keys = set(row_keys(x_train))
    p = PermutedMNIST([4], data_dir=mnist_dir, identity_first_task=True)
    assert torch.equal(p.member_task(0, 4, 0).perm, torch.arange(784))
    assert not torch.equal(p.member_task(0, 4, 1).perm, torch.arange(784))
    p.start_task(0)
    x, _ = p.batch(0)
    assert set(row_keys(mnist_to_uint8(x[0]))) <= train_keys
    # The default permutes task 0 too, and the option leaves later tasks as they were.
    q = PermutedMNIST([4], data_dir=mnist_dir)
    assert not torch.equal(q.member_task(0, 4, 0).perm, torch.arange(784))
    assert torch.equal(q.member_task(0, 4, 1).perm, p.member_task(0, 4, 1).perm)


def test_permuted_mnist_draws_a_fresh_10000_image_subset_per_task(mnist_dir):
    p = PermutedMNIST([1, 2], data_dir=mnist_dir)
    a, b, c = (p.member_task(0, 1, 0), p.member_task(0, 1, 1), p.member_task(1, 2, 0))
    assert a.x is p.x_train and a.index.shape == (10_000,) and a.y.shape == (10_000,)
    keys_a = Counter(row_keys(a.examples()))
    for other in (b, c):
        overlap = sum((keys_a & Counter(row_keys(other.examples()))).values())
        # Independent draws of 10,000 of 60,000 share about 1,667 images.
        assert 500 < overlap < 3_000
    assert len(keys_a) > 9_900  # drawn without replacement (MNIST has a few duplicate images)


def test_permuted_mnist_one_task_is_one_epoch_covering_each_subset_image_once(mnist_dir):
    p = PermutedMNIST([9, 10], data_dir=mnist_dir)
    assert p.steps_per_task * p.batch_size == 10_000
    for task in (0, 1):
        p.start_task(task)
        xs, ys = zip(*(p.batch(s) for s in range(p.steps_per_task)), strict=True)
        x, y = torch.cat(xs, 1), torch.cat(ys, 1)
        for k, seed in enumerate(p.seeds):
            td = p.member_task(k, seed, task)
            assert pairs(x[k], y[k]) == pairs(p.normalize(td.examples()[:, td.perm]), td.y)


def test_permuted_mnist_test_set_is_all_10000_test_images_under_the_task_permutation(mnist_dir, mnist):
    _, _, x_test, y_test = mnist
    x_test, y_test = torch.from_numpy(np.array(x_test)), torch.from_numpy(np.array(y_test))
    p = PermutedMNIST([3, 4], data_dir=mnist_dir)
    p.start_task(2)
    first = p.test_set(0)
    for task in (2, 0):
        tx, ty = p.test_set(task)
        assert tx.shape == (2, 10_000, 784)
        for k, seed in enumerate(p.seeds):
            perm = p.member_task(k, seed, task).perm
            assert torch.equal(ty[k], y_test)
            assert torch.equal(mnist_to_uint8(tx[k]), x_test[:, perm])
    # An earlier task's test set is rebuilt exactly after the stream has moved on.
    assert torch.equal(p.test_set(0)[0], first[0])
    assert torch.equal(p.test_set()[0], p.test_set(2)[0])


def test_permuted_mnist_memory_stays_flat_over_30_tasks_with_8_members(mnist_dir):
    p = PermutedMNIST(list(range(8)), data_dir=mnist_dir)
    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * page

    sizes, rss_after = [], []
    for task in range(30):
        p.start_task(task)
        p.batch(task)
        sizes.append(tensor_bytes(p))
        rss_after.append(rss())
    assert len(set(sizes)) == 1, "the stream keeps tensors from earlier tasks"
    # One task of 8 members is ~63 MB of images: a leak would grow RSS by > 1.5 GB here.
    assert rss_after[-1] - rss_after[2] < 400 * 2**20


# --------------------------------------------------------------------------- random labels


@pytest.fixture(scope="module")
def random_label_cases(mnist_dir, cifar10_dir):
    m = load_mnist(mnist_dir)
    c = load_cifar10(cifar10_dir)
    return {
        RandomLabelMNIST: (mnist_dir, m.x_train.reshape(len(m.x_train), -1), m.y_train),
        RandomLabelCIFAR: (cifar10_dir, c.x_train.transpose(0, 3, 1, 2), c.y_train),
    }


def _true_labels(images: torch.Tensor, dataset_x: np.ndarray, dataset_y: np.ndarray) -> list[int]:
    index = {}
    for key, label in zip(row_keys(torch.from_numpy(np.array(dataset_x))),
                          dataset_y.tolist(), strict=True):
        index.setdefault(key, label)
    return [index[key] for key in row_keys(images)]


@pytest.mark.parametrize("cls", [RandomLabelMNIST, RandomLabelCIFAR])
def test_random_label_pool_is_fixed_and_labels_are_a_fresh_shuffle_of_its_true_labels_each_task(
        random_label_cases, cls):
    data_dir, dataset_x, dataset_y = random_label_cases[cls]
    p = cls([5, 6], data_dir=data_dir)
    seed = 5
    tasks = [p.member_task(0, seed, t) for t in range(4)]
    assert tasks[0].x.shape == (1200, *p.input_shape)
    true = torch.tensor(_true_labels(tasks[0].x, dataset_x, dataset_y))
    assert len(set(true.tolist())) == 10
    for t, td in enumerate(tasks):
        assert torch.equal(td.x, tasks[0].x), "the 1,200 images change between tasks"
        assert td.y.dtype == torch.int64
        assert torch.equal(td.y.sort().values, true.sort().values), "class counts not kept"
        assert (td.y == true).float().mean() < 0.3, "labels are not reshuffled"
        for u in range(t):
            assert (td.y == tasks[u].y).float().mean() < 0.3, f"tasks {u} and {t} share labels"
    # Another seed draws another pool.
    other = p.member_task(1, 6, 0).x
    assert sum((Counter(row_keys(other)) & Counter(row_keys(tasks[0].x))).values()) < 300


@pytest.mark.parametrize("cls", [RandomLabelMNIST, RandomLabelCIFAR])
def test_random_label_every_75_steps_are_one_epoch_over_the_pool_with_the_task_labels(
        random_label_cases, cls):
    data_dir = random_label_cases[cls][0]
    p = cls([1, 2], data_dir=data_dir)
    assert p.steps_per_task * p.batch_size == 400 * 1200
    for task in (0, 1):
        p.start_task(task)
        for start in (0, 75, 29_925):
            xs, ys = zip(*(p.batch(s) for s in range(start, start + 75)), strict=True)
            x, y = torch.cat(xs, 1), torch.cat(ys, 1)
            for k, seed in enumerate(p.seeds):
                td = p.member_task(k, seed, task)
                assert pairs(x[k], y[k]) == pairs(p.normalize(td.x), td.y), (task, start)
        assert p.test_set() is None


def test_random_label_cifar_inputs_are_the_stored_images_under_spec_normalisation(random_label_cases):
    data_dir, dataset_x, _ = random_label_cases[RandomLabelCIFAR]
    keys = set(row_keys(torch.from_numpy(np.array(dataset_x))))
    p = RandomLabelCIFAR([0], data_dir=data_dir)
    p.start_task(0)
    x, _ = p.batch(0)
    raw = cifar_to_uint8(x[0])
    assert set(row_keys(raw)) <= keys
    mean = torch.tensor(CIFAR_MEAN).view(3, 1, 1)
    std = torch.tensor(CIFAR_STD).view(3, 1, 1)
    torch.testing.assert_close(x[0], (raw.float() / 255 - mean) / std, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- 5+1 CIFAR


def _cifar_marks(x: torch.Tensor) -> tuple[list[int], list[int], list[int]]:
    """(class, split, index) encoded in pixel (0, 0) of each fake CIFAR-100 image."""
    raw = cifar_to_uint8(x)
    return raw[:, 0, 0, 0].tolist(), raw[:, 1, 0, 0].tolist(), raw[:, 2, 0, 0].tolist()


def test_five_plus_one_cifar_alternates_5_and_1_new_classes_never_reused(cifar100_dir):
    p = FivePlusOneCIFAR([1, 2], data_dir=cifar100_dir)  # default 30 tasks: 90 of 100 classes
    for seed in (1, 2):
        seen = []
        for t in range(p.tasks):
            classes = p.task_classes(seed, t).tolist()
            assert len(classes) == (5 if t % 2 == 0 else 1)
            seen += classes
        assert len(seen) == len(set(seen)) == 90 and all(0 <= c < 100 for c in seen)
    assert p.task_classes(1, 0).tolist() != p.task_classes(2, 0).tolist()
    assert [p.reported(t) for t in range(6)] == [True, False] * 3


def test_five_plus_one_cifar_tasks_hold_all_and_only_their_classes_with_original_labels(cifar100_dir):
    p = FivePlusOneCIFAR([1, 2], data_dir=cifar100_dir, tasks=6, steps_per_task=30, batch_size=10)
    for task in range(6):
        p.start_task(task)
        n_classes = 5 if task % 2 == 0 else 1
        for k, seed in enumerate(p.seeds):
            classes = set(p.task_classes(seed, task).tolist())
            td = p.member_task(k, seed, task)
            assert len(td.y) == CIFAR100_TRAIN_PER_CLASS * n_classes
            assert set(td.y.tolist()) == classes
            cls, split, idx = _cifar_marks(p.normalize(td.x))
            assert cls == td.y.tolist() and set(split) == {0}
            assert len(set(zip(cls, idx, strict=True))) == len(cls)  # every training image once
            # Batches carry the original 100-way labels of their images.
            for step in (0, p.steps_per_task - 1):
                x, y = p.batch(step)
                cls, split, _ = _cifar_marks(x[k])
                assert cls == y[k].tolist() and set(split) == {0} and set(cls) <= classes
            tx, ty = p.test_set()
            assert tx.shape == (2, CIFAR100_TEST_PER_CLASS * n_classes, 3, 32, 32)
            cls, split, idx = _cifar_marks(tx[k])
            assert cls == ty[k].tolist() and set(split) == {1} and set(cls) == classes
            assert len(set(zip(cls, idx, strict=True))) == len(cls)


def test_five_plus_one_cifar_one_epoch_of_a_hard_task_covers_it_once(cifar100_dir):
    p = FivePlusOneCIFAR([3], data_dir=cifar100_dir, tasks=2, steps_per_task=20, batch_size=10)
    p.start_task(0)
    td = p.member_task(0, 3, 0)
    for start in (0, 10):
        xs, ys = zip(*(p.batch(s) for s in range(start, start + 10)), strict=True)
        assert pairs(torch.cat(xs, 1)[0], torch.cat(ys, 1)[0]) == pairs(p.normalize(td.x), td.y)


def test_five_plus_one_cifar_too_many_tasks_for_the_classes_is_a_value_error(cifar100_dir):
    FivePlusOneCIFAR([0], data_dir=cifar100_dir, tasks=32)  # 16*5 + 16*1 = 96 classes: fits
    with pytest.raises(ValueError, match="classes"):
        FivePlusOneCIFAR([0], data_dir=cifar100_dir, tasks=33)  # 17*5 + 16 = 101


def test_five_plus_one_cifar_task_smaller_than_a_batch_is_a_value_error(cifar100_dir):
    # The fake easy task has 20 images: fewer than the default batch of 32.
    p = FivePlusOneCIFAR([0], data_dir=cifar100_dir, tasks=2)
    p.start_task(0)
    with pytest.raises(ValueError, match="batch_size"):
        p.start_task(1)


# --------------------------------------------------------------------------- Continual ImageNet


def _imagenet_marks(x: torch.Tensor) -> tuple[list[int], list[int]]:
    """(class, index in class file) encoded in pixel (0, 0) of each fake ImageNet-32 image."""
    raw = x.round().to(torch.int64)
    return raw[:, 0, 0, 0].tolist(), (raw[:, 1, 0, 0] * 256 + raw[:, 2, 0, 0]).tolist()


def test_continual_imagenet_tasks_are_2_new_classes_labelled_0_1_split_600_100(imagenet_dir):
    p = ContinualImageNet([1, 2], data_dir=imagenet_dir, tasks=6, steps_per_task=15, batch_size=20)
    assert p.params["train_per_class"] == 600 and p.params["classes_per_task"] == 2
    for seed in p.seeds:
        seen = [c for t in range(6) for c in p.task_classes(seed, t).tolist()]
        assert len(seen) == len(set(seen)) == 12
    for task in (0, 1, 5):
        p.start_task(task)
        tx, ty = p.test_set()
        assert tx.shape == (2, 200, 3, 32, 32)
        for step in (0, 14):
            x, y = p.batch(step)
            for k, seed in enumerate(p.seeds):
                classes = p.task_classes(seed, task).tolist()
                cls, idx = _imagenet_marks(x[k])
                assert [classes.index(c) for c in cls] == y[k].tolist()
                assert max(idx) < 600
        for k, seed in enumerate(p.seeds):
            classes = p.task_classes(seed, task).tolist()
            td = p.member_task(k, seed, task)
            cls, idx = _imagenet_marks(td.x.float())
            assert sorted(zip(cls, idx, strict=True)) == [(c, i) for c in sorted(classes) for i in range(600)]
            assert [classes.index(c) for c in cls] == td.y.tolist()
            assert Counter(td.y.tolist()) == {0: 600, 1: 600}
            cls, idx = _imagenet_marks(tx[k])
            assert sorted(zip(cls, idx, strict=True)) == [(c, i) for c in sorted(classes)
                                                          for i in range(600, 700)]
            assert [classes.index(c) for c in cls] == ty[k].tolist()


def test_continual_imagenet_images_are_used_as_stored(imagenet_dir):
    p = ContinualImageNet([4], data_dir=imagenet_dir, tasks=1, steps_per_task=2, batch_size=20)
    p.start_task(0)
    x, _ = p.batch(1)
    cls, idx = _imagenet_marks(x[0])
    for image, c, i in zip(x[0], cls, idx, strict=True):
        stored = np.load(imagenet_dir / "imagenet32" / "classes" / f"{c}.npy")[i]
        assert torch.equal(image, torch.from_numpy(stored.transpose(2, 0, 1)).float())


def test_continual_imagenet_one_epoch_is_60_batches_of_20_covering_the_1200_images(imagenet_dir):
    p = ContinualImageNet([4], data_dir=imagenet_dir, tasks=1, steps_per_task=60, batch_size=20)
    p.start_task(0)
    xs, ys = zip(*(p.batch(s) for s in range(60)), strict=True)
    td = p.member_task(0, 4, 0)
    assert pairs(torch.cat(xs, 1)[0], torch.cat(ys, 1)[0]) == pairs(p.normalize(td.x), td.y)


def test_continual_imagenet_too_many_tasks_for_the_classes_is_a_value_error(imagenet_dir):
    ContinualImageNet([0], data_dir=imagenet_dir, tasks=6)
    with pytest.raises(ValueError, match="classes"):
        ContinualImageNet([0], data_dir=imagenet_dir, tasks=7)
