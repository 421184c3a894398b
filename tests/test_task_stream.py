"""plasticlab.problems.task_stream: a problem's stream for one model of your own — the batches
member k of an ensemble trains on, task by task."""

from __future__ import annotations

import pytest
import torch

from plasticlab.problems import FivePlusOneCIFAR, PermutedMNIST, RandomLabelCIFAR, task_stream

SEEDS = [5, 1, 3]


@pytest.mark.parametrize("cls,folder", [(PermutedMNIST, "mnist_dir"), (RandomLabelCIFAR, "cifar10_dir")])
def test_seed_s_streams_the_batches_and_test_sets_its_member_in_an_ensemble_trains_on(cls, folder,
                                                                                       request):
    data_dir = request.getfixturevalue(folder)
    settings = {"tasks": 2, "steps_per_task": 4, "batch_size": 8, "data_dir": data_dir}
    ensemble = cls(SEEDS, **settings)
    k = SEEDS.index(3)
    for task in task_stream(cls.name, seed=3, **settings):
        ensemble.start_task(task.index)
        batches = list(task)
        assert torch.equal(task.sample_inputs(20), ensemble.sample_inputs(20, "probe")[k])
        assert len(batches) == len(task) == 4 and task.examples == 32 and task.reported
        for step, (x, y) in enumerate(batches):
            xs, ys = ensemble.batch(step)
            assert x.shape == xs.shape[1:] and torch.equal(x, xs[k]) and torch.equal(y, ys[k])
        for n in (None, 50):  # all of it, and its first 50 in the seed's shuffle
            held_out, member_held_out = task.test_set(n), ensemble.test_examples(task.index, n)
            assert (held_out is None) == (member_held_out is None) == (not cls.has_test_sets)
            if held_out is not None:
                assert len(held_out[1]) == (50 if n else len(member_held_out[1][k]))
                assert torch.equal(held_out[0], member_held_out[0][k])
                assert torch.equal(held_out[1], member_held_out[1][k])


def test_a_stream_resumed_at_a_task_gives_that_tasks_batches(mnist_dir):
    settings = {"tasks": 3, "steps_per_task": 3, "data_dir": mnist_dir}
    whole = [[(x.clone(), y.clone()) for x, y in task]
             for task in task_stream("permuted_mnist", 7, **settings)]
    resumed = [[(x, y) for x, y in task]
               for task in task_stream(PermutedMNIST, 7, first_task=1, **settings)]
    assert len(resumed) == 2
    for a, b in zip(whole[1:], resumed, strict=True):
        assert all(torch.equal(xa, xb) and torch.equal(ya, yb)
                   for (xa, ya), (xb, yb) in zip(a, b, strict=True))


def test_a_tasks_batches_after_the_stream_moved_on_are_an_error(mnist_dir):
    stream = task_stream("permuted_mnist", 0, tasks=2, steps_per_task=2, data_dir=mnist_dir)
    first = next(stream)
    next(stream)  # task 1 taken: task 0's examples are gone
    with pytest.raises(RuntimeError, match="task 0's batches were asked for after the stream moved on"):
        list(first)
    with pytest.raises(RuntimeError, match="task 0's sample_inputs were asked for after"):
        first.sample_inputs(4)


def test_unknown_problems_and_tasks_are_errors_that_say_what_there_is(mnist_dir):
    with pytest.raises(ValueError, match="unknown problem 'permuted'; valid: permuted_mnist"):
        task_stream("permuted", 0)
    with pytest.raises(ValueError, match=r"first_task 5 is not one of its tasks 0\.\.1"):
        task_stream("permuted_mnist", 0, first_task=5, tasks=2, data_dir=mnist_dir)  # at once


def test_a_task_is_reported_where_the_problem_counts_it_in_the_total(cifar100_dir):
    # 5+1 CIFAR's total average online accuracy counts its hard tasks only (SPEC §3), as a
    # report does (CIFAR-100 here: files the tests write in the official layout)
    stream = task_stream("five_plus_one_cifar", 0, tasks=4, steps_per_task=1, batch_size=4,
                         data_dir=cifar100_dir)
    assert [task.reported for task in stream] == [FivePlusOneCIFAR.reported(t) for t in range(4)] \
        == [True, False, True, False]
