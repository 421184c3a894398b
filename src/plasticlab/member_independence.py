"""How far a seed's run is independent of its ensemble, for the manifest.

DESIGN's rule: member k of an ensemble equals the same seed run alone. Whether that holds to the
bit depends on where the ensemble trains; :func:`member_independence` states it for one run,
so a manifest can record it next to the ensemble's composition. The evidence and the figures
are in docs/member-independence.md.
"""

from __future__ import annotations

import torch

DOC = "docs/member-independence.md"

BIT_IDENTICAL = (
    "CPU, one torch thread (the engine's default): member k of an ensemble equals seed k run "
    "alone bit for bit — parameters and online accuracies — for the MLP (hand-written or "
    "autograd backward) and the CNN, with Adam (a penalty's decay in its pass or not), SGD and "
    "UPGD. Whole runs are tested (tests/test_member_independence.py: Permuted MNIST MLP 3 tasks × "
    "100 steps for Baseline, L2 Init, L1 Init, Huber Init with Adam, L2 Init with SGD and L2 "
    "Init with UPGD; Random Label CIFAR CNN 2 × 30 with L2 Init and Adam); every registered "
    "method was checked with Adam by benchmarks/member_independence.py --every-method (MLP 3 × "
    "400, CNN 2 × 100) and with UPGD (--optimizer upgd: MLP 3 × 400, CNN 2 × 100; "
    "upgd_nonprotecting: MLP 3 × 400), all bit-identical (FIRE on "
    "the CNN since its conv-bank slices are made contiguous; UPGD since its sigmoid is taken "
    "member by member; tests/test_member_independence.py).")
"""What is bit-identical, and the tests and checks behind it."""

NOT_BIT_IDENTICAL = {
    "cuda": ("CUDA: not bit-identical. Batched matrix products and the grouped convolution may "
             "block their sums differently for another K; tests/test_cuda.py bounds the "
             "difference at 2 predictions of 480 over 2 tasks × 30 steps (MLP, L2 Init). Its "
             "size over whole runs has not been measured."),
    "threads": ("CPU with more than one torch thread: not bit-identical. Work is split between "
                "threads by tensor size, which grows with K; measured with 2 threads (member 3 of "
                "seeds 0-7 vs seed 3 alone): MLP L2 Init + Adam, 3 tasks × 400 steps, parameters "
                "apart by up to 2.9e-7 from the first task on, online accuracies equal; CNN, 3 × "
                "200, 0.5 points of online accuracy and 0.047 in a parameter."),
    "other optimizers": "Optimizers other than Adam, SGD and UPGD: not tested.",
    "small products": ("EWC (and L2 Init + EWC) and FIRE at a width other than the paper's: not "
                       "bit-identical. EWC's Fisher takes one example per forward pass and FIRE's "
                       "Newton-Schulz multiplies whole weight matrices; the CPU's matrix library "
                       "rounds such small products differently where a member's slab of the "
                       "stacked weights does not start on a 64-byte boundary (measured at width "
                       "0.25, whose 25 x 25 layer is 2,500 bytes a member: member k differs from "
                       "seed k alone in the last bits from the first task end on). Bit-identical "
                       "at width 1 (benchmarks/member_independence.py --every-method)."),
}
"""What is not (or not known to be) bit-identical, and why."""


SMALL_PRODUCTS = ("ewc", "l2_init_ewc", "fire")
"""Methods whose task-end work multiplies small matrices member by member in a batched product
(EWC's one-example Fisher, FIRE's Newton-Schulz): bit-identical at width 1 only
(``NOT_BIT_IDENTICAL["small products"]``)."""


def member_independence(device: str | torch.device = "cpu", threads: int = 1,
                        optimizer: str = "adam", method: str | None = None,
                        arch: str | None = None, width: float = 1.0) -> dict:
    """The statement for one run (its device, torch threads, optimizer, method, network
    ``mlp``/``cnn`` and width multiplier): ``bit_identical`` (True: tested or checked so; False:
    not; None: not tested), ``statement`` and ``doc`` (where the evidence is)."""
    device = torch.device(device)
    if device.type == "cuda":
        flag, text = False, NOT_BIT_IDENTICAL["cuda"]
    elif device.type != "cpu":
        flag, text = None, f"{device.type}: not tested."
    elif int(threads) != 1:
        flag, text = False, NOT_BIT_IDENTICAL["threads"]
    elif optimizer not in ("adam", "sgd", "upgd", "upgd_nonprotecting"):
        flag, text = None, NOT_BIT_IDENTICAL["other optimizers"]
    elif method in SMALL_PRODUCTS and float(width) != 1.0:
        flag, text = False, NOT_BIT_IDENTICAL["small products"]
    else:
        flag, text = True, BIT_IDENTICAL
    return {"bit_identical": flag, "statement": text, "doc": DOC}


__all__ = ["BIT_IDENTICAL", "NOT_BIT_IDENTICAL", "SMALL_PRODUCTS", "member_independence"]
