"""Permuted and Random Label MNIST on a user's own images (the ``npz`` problem parameter): the
MLP sized by them, MNIST runs' configurations and numbers left as they were, a missing file one
error before any run starts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plasticlab.cli import main
from plasticlab.data import DataError, fetch_datasets
from plasticlab.engine import EnsembleTraining, train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.store import ResultStore
from plasticlab.problems import PROBLEMS
from plasticlab.run_config import Members

OWN = ("permuted_mnist", "random_label_mnist")


def write_npz(path, shape, classes, train, test, seed, level):
    """``train`` and ``test`` uint8 images of ``shape`` (channels last) in ``classes`` classes,
    each class a pixel level of its own (``level`` apart), so they can be learnt; the path and
    the training images."""
    rng = np.random.default_rng(seed)

    def images(n):
        y = rng.integers(0, classes, n)
        x = rng.integers(0, level - 10, (n, *shape)) + level * y.reshape(-1, *[1] * len(shape))
        return x.astype(np.uint8), y

    (x_train, y_train), (x_test, y_test) = images(train), images(test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path, x_train


@pytest.fixture
def own_npz(tmp_path):
    """400 training and 100 test images, 6×6×2, 3 classes."""
    return write_npz(tmp_path / "own.npz", (6, 6, 2), 3, 400, 100, seed=0, level=50)


def config(problem, **params):
    sizes = {"permuted_mnist": {"examples_per_task": 320}, "random_label_mnist": {"examples": 100}}
    return resolve_config({"problem": problem, "method": "l2_init", "params": {"strength": 1e-2},
                           "tasks": 2, "steps_per_task": 20,
                           "problem_params": {**sizes[problem], **params}})


@pytest.mark.parametrize("problem", OWN)
def test_own_images_are_flattened_scaled_as_mnist_and_size_the_mlp(problem, own_npz):
    path, x_train = own_npz
    stream = PROBLEMS[problem]([0, 1], tasks=2, steps_per_task=5, batch_size=8,
                               **config(problem, npz=str(path)).problem_params)
    assert (stream.input_shape, stream.num_outputs) == ((72,), 3)
    assert PROBLEMS[problem].input_shape == (784,) and PROBLEMS[problem].num_outputs == 10
    stream.start_task(0)
    x, y = stream.batch(0)
    assert x.shape == (2, 8, 72) and set(y.unique().tolist()) <= {0, 1, 2}
    pixels = torch.from_numpy(x_train.reshape(400, -1)).float().mul(2 / 255).sub(1)
    if problem == "random_label_mnist":  # the rows are training images, as they are
        assert all(any(torch.equal(row, p) for p in pixels) for row in x[0])
    training = EnsembleTraining(Members.from_config(config(problem, npz=str(path)), [0, 1]))
    with torch.no_grad():
        assert training.net(torch.zeros(2, 4, 72)).shape == (2, 4, 3)


@pytest.mark.parametrize("problem", OWN)
def test_an_mnist_run_keeps_its_configuration_and_numbers(problem, data_dir):
    cfg = config(problem)
    assert "npz" not in cfg.problem_params  # so its run id, results and checkpoints stay
    stream = PROBLEMS[problem]([0], tasks=1, steps_per_task=1, data_dir=data_dir)
    assert (stream.input_shape, stream.num_outputs) == ((784,), 10)


def test_own_images_train_and_are_recorded_with_the_file_they_came_from(own_npz, tmp_path, capsys):
    path, _ = own_npz
    out = tmp_path / "runs"
    assert main(["run", "--problem", "permuted_mnist", "--method", "l2_init", "--set", f"npz={path}",
                 "--set", "examples_per_task=320", "--seeds", "0-1", "--tasks", "3",
                 "--steps-per-task", "30", "--out", str(out), "--no-progress"]) == 0
    with ResultStore(out) as store:
        runs = store.runs()
        assert [r["status"] for r in runs] == ["finished", "finished"]
        assert runs[0]["config"]["problem_params"]["npz"] == str(path)
        assert any(str(path.resolve()) in f for f in runs[0]["manifest"]["data_files"])
        accuracy = store.task_metrics(runs[0]["run_id"])["online_accuracy"]
    assert accuracy[-1] > 1 / 3 + 0.1  # the three levels are learnt, well above chance


@pytest.mark.parametrize("fault, message", [
    ("missing", "no such file"),
    ("malformed", "missing array"),  # an .npz without y_test: each worker would refuse it
])
def test_a_missing_or_malformed_npz_is_one_error_before_any_run_starts(fault, message, tmp_path,
                                                                        capsys):
    path = tmp_path / "images.npz"
    if fault == "malformed":
        np.savez(path, x_train=np.zeros((4, 28, 28), np.uint8), y_train=np.zeros(4, np.int64),
                 x_test=np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(DataError, match=f"images.npz: {message}"):
        fetch_datasets([PROBLEMS["permuted_mnist"].reads({"npz": str(path)})])
    sweep = tmp_path / "own.toml"
    sweep.write_text(f'name = "own"\nproblem = "permuted_mnist"\nmethods = ["baseline", "l2_init"]\n'
                     f'seeds = "0-1"\ntasks = 1\nsteps_per_task = 5\n'
                     f'[problem_params]\nnpz = "{path}"\n')
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--workers", "2",
                 "--no-progress"]) == 2
    assert capsys.readouterr().err.count(message) == 1
    with ResultStore(tmp_path / "out") as store:
        assert store.runs() == []


def test_mnist_is_not_fetched_for_a_run_on_own_images(own_npz):
    path, _ = own_npz
    assert PROBLEMS["permuted_mnist"].reads({"npz": str(path)}) == path
    assert PROBLEMS["random_label_mnist"].reads({}) == "mnist"


def test_an_ensemble_on_own_images_trains_member_k_as_seed_k_alone(own_npz):
    path, _ = own_npz
    cfg = config("permuted_mnist", npz=str(path))
    both = train_ensemble(Members.from_config(cfg, [0, 1]), measure=False)
    alone = train_ensemble(Members.from_config(cfg, [1]), measure=False)
    assert both.members[1].task_online_accuracy == alone.members[0].task_online_accuracy


@pytest.fixture
def own_colour_npz(tmp_path):
    """300 training and 50 test colour images, 20×20×3, 4 classes."""
    return write_npz(tmp_path / "colour.npz", (20, 20, 3), 4, 300, 50, seed=1, level=50)


def test_random_label_cifar_reads_own_colour_images_normalised_by_their_own_statistics(own_colour_npz):
    path, x_train = own_colour_npz
    stream = PROBLEMS["random_label_cifar"]([0], tasks=1, steps_per_task=5, batch_size=300,
                                            examples=300, npz=str(path))
    assert (stream.input_shape, stream.num_outputs) == ((3, 20, 20), 4)
    stream.start_task(0)
    x, _ = stream.batch(0)  # every training image once: the batch is the whole set
    assert x.shape == (1, 300, 3, 20, 20)
    channels = x[0].double().transpose(0, 1).reshape(3, -1)
    torch.testing.assert_close(channels.mean(1), torch.zeros(3, dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(channels.std(1), torch.ones(3, dtype=torch.float64), atol=1e-4, rtol=0)
    cfg = resolve_config({"problem": "random_label_cifar", "method": "baseline", "tasks": 1,
                          "steps_per_task": 5, "problem_params": {"examples": 100, "npz": str(path)}})
    net = EnsembleTraining(Members.from_config(cfg, [0])).net
    with torch.no_grad():
        assert net(torch.zeros(1, 2, 3, 20, 20)).shape == (1, 2, 4)


def test_images_too_small_for_the_cnn_are_refused_saying_so(tmp_path):
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 255, (50, 12, 12, 3)).astype(np.uint8), rng.integers(0, 2, 50)
    np.savez(tmp_path / "small.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    cfg = resolve_config({"problem": "random_label_cifar", "method": "baseline", "tasks": 1,
                          "steps_per_task": 5,
                          "problem_params": {"examples": 50, "npz": str(tmp_path / "small.npz")}})
    with pytest.raises(ValueError, match=r"convolutions leave nothing of a 12×12 input \(after conv "
                                         r"layer 2, 5×5, pooled\); give it larger images"):
        EnsembleTraining(Members.from_config(cfg, [0]))


def test_a_cifar_run_keeps_its_configuration(cifar10_dir):
    cfg = resolve_config({"problem": "random_label_cifar", "method": "baseline", "tasks": 1,
                          "steps_per_task": 5})
    assert "npz" not in cfg.problem_params
    stream = PROBLEMS["random_label_cifar"]([0], tasks=1, steps_per_task=1, data_dir=cifar10_dir)
    assert (stream.input_shape, stream.num_outputs) == ((3, 32, 32), 10)


def test_a_report_names_the_images_a_study_read_and_keeps_two_data_sets_apart(own_npz, tmp_path):
    path, _ = own_npz
    other = tmp_path / "other.npz"
    with np.load(path) as f:
        np.savez(other, **{k: f[k] for k in f.files})
    out = tmp_path / "runs"
    for npz in (path, other):
        assert main(["run", "--problem", "permuted_mnist", "--method", "baseline", "--set", f"npz={npz}",
                     "--set", "examples_per_task=320", "--seeds", "0-1", "--tasks", "2",
                     "--steps-per-task", "10", "--out", str(out), "--no-progress"]) == 0
    assert main(["report", str(out), "--formats", "png"]) == 0
    text = (out / "report" / "report.md").read_text()
    assert "## Permuted MNIST · Adam · on other.npz" in text
    assert "## Permuted MNIST · Adam · on own.npz" in text
    assert (out / "report" / "figures" / "permuted_mnist-adam-own-online_accuracy.png").is_file()
    alone = tmp_path / "alone"  # one data set: the study is one part, still named by it
    assert main(["run", "--problem", "permuted_mnist", "--method", "baseline", "--set", f"npz={path}",
                 "--set", "examples_per_task=320", "--seeds", "0-1", "--tasks", "2",
                 "--steps-per-task", "10", "--out", str(alone), "--no-progress"]) == 0
    assert main(["report", str(alone), "--formats", "png"]) == 0
    assert "## Permuted MNIST · Adam · on own.npz" in (alone / "report" / "report.md").read_text()


FIELD = {  # the field's problems on own images: (problem, parameters, the images' fixture)
    "split_mnist": ({"classes_per_task": 1, "examples_per_class": 20, "test_per_class": 5}, "own_npz"),
    "split_cifar": ({"classes_per_task": 1, "examples_per_class": 20, "test_per_class": 5,
                     "head": "growing"}, "own_colour_npz"),
    "warm_start_mnist": ({"warm_fraction": 0.5}, "own_npz"),
    "warm_start_cifar": ({"warm_fraction": 0.5}, "own_colour_npz"),
    # and the paper's two whose data is not here (CIFAR-100, ImageNet-32)
    "five_plus_one_cifar": ({"hard_classes": 1, "easy_classes": 1}, "own_colour_npz"),
    "continual_imagenet": ({"classes_per_task": 2, "train_per_class": 5}, "own_colour_npz"),
}


@pytest.mark.parametrize("problem", list(FIELD))
def test_the_fields_problems_and_the_papers_other_two_read_own_images_too(problem, request):
    params, fixture = FIELD[problem]
    path, x_train = request.getfixturevalue(fixture)
    shape = (72,) if fixture == "own_npz" else (3, 20, 20)
    classes = 2 if problem == "continual_imagenet" else 3 if fixture == "own_npz" else 4
    stream = PROBLEMS[problem]([0, 1], tasks=2, steps_per_task=2, batch_size=4, npz=str(path), **params)
    assert (stream.input_shape, stream.num_outputs) == (shape, classes)
    assert PROBLEMS[problem].reads({"npz": str(path)}) == path
    stream.start_task(1)
    x, y = stream.batch(0)
    assert x.shape == (2, 4, *shape) and int(y.max()) < classes
    if params.get("head") == "growing":
        assert stream.output_mask(1).shape == (2, classes)
    cfg = resolve_config({"problem": problem, "method": "baseline", "tasks": 2, "steps_per_task": 2,
                          "batch_size": 4, "problem_params": {**params, "npz": str(path)}})
    net = EnsembleTraining(Members.from_config(cfg, [0])).net
    with torch.no_grad():
        assert net(torch.zeros(1, 2, *shape)).shape == (1, 2, classes)


def test_continual_imagenet_on_own_images_takes_each_classs_first_training_images_as_stored(
        own_colour_npz):
    path, x_train = own_colour_npz
    stream = PROBLEMS["continual_imagenet"]([3], tasks=2, steps_per_task=2, batch_size=4,
                                            npz=str(path), train_per_class=5)
    saved = np.load(path)
    for task in range(2):
        first, second = stream.task_classes(3, task)
        task_data = stream.member_task(0, 3, task)
        expected = np.concatenate([saved["x_train"][saved["y_train"] == c][:5] for c in (first, second)])
        assert np.array_equal(task_data.x.numpy(), expected.transpose(0, 3, 1, 2))  # used as stored
        assert task_data.y.tolist() == [0] * 5 + [1] * 5
        # every class's test images as many as the smallest class has: one size for every run
        smallest = np.bincount(saved["y_test"]).min()
        assert stream.member_test(0, 3, task).y.tolist() == [0] * smallest + [1] * smallest
    assert set(stream.task_classes(3, 0)).isdisjoint(stream.task_classes(3, 1))  # never reused
    with pytest.raises(ValueError, match=r"3 tasks need 6 distinct classes, .*colour.npz has 4"):
        PROBLEMS["continual_imagenet"]([3], tasks=3, steps_per_task=2, npz=str(path))


def test_a_users_classes_are_cut_to_the_smallest_ones_size_and_an_empty_class_is_refused():
    from plasticlab.problems.image_sets import balanced_classes

    y = torch.tensor([2, 1, 0, 1, 2, 2, 0])
    assert balanced_classes(y, 3, "own.npz", "x_train").tolist() == [True, True, True, True, True,
                                                                     False, True]
    with pytest.raises(ValueError, match=r"own.npz: class\(es\) \[3\] have no image in x_test"):
        balanced_classes(y, 4, "own.npz", "x_test")
