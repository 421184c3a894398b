"""Churn across a task: how much training on one task changes the network's outputs on a fixed
reference batch (bluecontra/C-CHAIN, Tang et al. ICML 2025, ``crl_minatar/agents/
double_dqn_c_chain.py`` ``invest_policy_churn``: the mean |Q_now − Q_before| and the fraction of
states whose greedy action changed, on a reference batch of states).

plasticlab fixes the reference batch X_ref for each task — ``samples`` training inputs of the
task, a stream of their own (``problem.sample_inputs(n, "churn")``) — records the logits
z₀(x) of the network that starts the task (after the previous task's boundary action, if the
method has one) and compares them with the logits z₁(x) of the network that ends it. C-CHAIN
measures churn over a window of updates; here the window is the whole task. These are the
reference code's measurements of churn; the churn its loss reduces (the mean squared change,
or the KL divergence of the softmaxes, between two consecutive updates) is
:func:`plasticlab.methods.c_chain.churn`. Definitions: docs/measurements.md.
"""

from __future__ import annotations

import torch


def _check(before: torch.Tensor, after: torch.Tensor) -> None:
    if before.shape != after.shape or before.dim() != 3:
        raise ValueError(f"churn compares logits [K, n, classes] of the same reference batch, got "
                         f"{tuple(before.shape)} and {tuple(after.shape)}")


def churn(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Output churn (1/(n·C)) Σₓ Σ_c |z₁(x)_c − z₀(x)_c|: the mean absolute change of the
    logits over the n reference inputs and C outputs, ``[K]`` float64 (C-CHAIN's
    ``q_diff_abs``). Outputs that are −∞ (a growing head's outputs not yet in it) take no part:
    the mean runs over the entries finite at both ends."""
    _check(before, after)
    z0, z1 = before.detach().double(), after.detach().double()
    both = torch.isfinite(z0) & torch.isfinite(z1)
    change = torch.where(both, z1 - z0, 0.0).abs()
    return change.flatten(1).sum(1) / both.flatten(1).sum(1).clamp(min=1)


def prediction_churn(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Prediction churn: the fraction of reference inputs whose predicted class argmax_c z(x)_c
    changed, ``[K]`` float64 (C-CHAIN's ``greedy_a_diff``); NaN for a single output (a
    regression's: no class is predicted)."""
    _check(before, after)
    if before.shape[-1] < 2:
        return torch.full(before.shape[:1], float("nan"), dtype=torch.float64, device=before.device)
    return (after.argmax(-1) != before.argmax(-1)).double().mean(1)


__all__ = ["churn", "prediction_churn"]
