"""An ensemble's members (:class:`plasticlab.run_config.Members`): each member's seed, method
parameters, step size and method, the configs their runs are stored under, and the fingerprint
their checkpoint is keyed by."""

import pytest

from plasticlab.experiments.recording import checkpoint_path
from plasticlab.run_config import Members, RunConfig

CONFIG = RunConfig("permuted_mnist", "l2_init", "adam", 1e-3, 500, 625, 16, params={"strength": 1e-2})
LAMBDAS = [{"strength": 1e-2}, {"strength": 1e-3}]


def test_checkpoints_keep_the_names_they_were_saved_under():
    """The names every existing results store's checkpoints have (computed by the code before
    :class:`Members`): a change here would leave every interrupted sweep unable to resume."""
    assert checkpoint_path("o", Members.from_config(CONFIG, [0, 1])).name == "run-ca205194efc1b624.ckpt"
    assert checkpoint_path("o", Members.from_config(CONFIG, [0, 1], LAMBDAS), "ensemble").name == \
        "ensemble-3e8c220bd2906f41.ckpt"
    grid = Members.from_config(CONFIG, [0, 1], LAMBDAS, [1e-3, 1e-4])
    assert checkpoint_path("o", grid, "ensemble").name == "ensemble-7c9ffd652c632fea.ckpt"
    mixed = Members.from_config(CONFIG, [0, 1], [{"strength": 1e-2}, {}], [1e-3, 1e-4],
                                ["l2_init", "baseline"])
    assert checkpoint_path("o", mixed, "ensemble").name == "ensemble-7c65a456cac5008f.ckpt"


def test_each_member_has_its_own_parameters_step_size_and_method_over_the_configs():
    same = Members.from_config(CONFIG, [3, 4])
    assert same.rates() == [1e-3, 1e-3] and same.method_names() == ["l2_init", "l2_init"]
    assert same.method_params() == [{"strength": 1e-2}] * 2
    grid = Members.from_config(CONFIG, [0, 0], [{"strength": 1e-4}, {}], lr=[1e-4, 1e-3])
    assert [(c["params"], c["lr"], c["method"]) for c in grid.configs()] == [
        ({"strength": 1e-4}, 1e-4, "l2_init"), ({"strength": 1e-2}, 1e-3, "l2_init")]
    # several methods: each member's parameters are its own method's, whole
    mixed = Members.from_config(CONFIG, [0, 1], [{"strength": 1e-3}, {}], methods=["l2", "baseline"])
    assert [(c["method"], c["params"]) for c in mixed.configs()] == [("l2", {"strength": 1e-3}),
                                                                      ("baseline", {})]


def test_a_members_list_of_another_length_than_the_seeds_is_an_error():
    for field, value in (("params", [{}]), ("lr", [1e-3] * 3), ("methods", ["baseline"])):
        with pytest.raises(ValueError, match=f"member {field} has {len(value)} entries for 2 members"):
            Members.from_config(CONFIG, [0, 1], **{field: value})
