"""Supervised regression of the MLP policy (:class:`taigym.agents.policy.MLPPolicy`) on expert
labels, shared by ``bc`` (one fit) and ``dagger`` (one fit per round, warm-started).

:class:`Fit`: MSE, Adam, minibatches, early stopping on validation episodes, with a resumable
state. With ``ema_epochs`` > 0 it validates and returns an exponential moving average of the
weights (Polyak averaging) instead of the last weights: the closed-loop success of the raw
weights swings from epoch to epoch, that of their average much less (docs: the learned agents'
page). Everything is seeded: the same data, configuration and seed give the same weights.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from taigym.agents.base import check_ranges
from taigym.agents.policy import DEFAULT_HIDDEN, MLPPolicy

#: hyperparameters of the network and of :func:`fit` (shared by ``bc`` and ``dagger``)
TRAIN_DEFAULTS: dict[str, Any] = dict(
    hidden=DEFAULT_HIDDEN,  # widths of the hidden layers
    ignore_obs=[],          # observation entries the policy does not see (indices)
    lr=1e-3,                # Adam learning rate
    weight_decay=0.0,       # Adam weight decay
    batch_size=256,         # minibatch size (transitions)
    max_epochs=200,         # epochs per fit
    patience=20,            # early stopping: epochs without a better validation loss
    val_fraction=0.1,       # fraction of the episodes held out for early stopping
    seed=0,                 # seeds the initialisation, the split and the minibatch order
    threads=1,              # torch intra-op threads while training (the machine is shared)
    features="auto",        # input features (taigym.agents.features): auto | target_path | none
    members=1,              # ensemble size: independently initialised MLPs, the action is their mean
    input_noise=0.0,        # std of Gaussian noise added to the normalised inputs while training
    ema_epochs=0.0,         # time constant (epochs) of the weights' moving average the fit returns; 0: off
)

#: accepted ranges of the numeric options of :func:`fit` (``check_cfg`` raises ValueError outside)
TRAIN_RANGES = dict(lr=(1e-8, 1.0, ""), weight_decay=(0.0, 1.0, ""), batch_size=(1, 1 << 20, "transitions"),
                    max_epochs=(1, 100_000, "epochs"), patience=(1, 100_000, "epochs"),
                    val_fraction=(0.0, 0.9, "(0: no early stopping)"), seed=(0, 2**32 - 1, ""),
                    threads=(1, 256, ""), members=(1, 64, "MLPs"), input_noise=(0.0, 10.0, "(normalised units)"),
                    ema_epochs=(0.0, 1000.0, "epochs (0: off)"))



def check_cfg(cfg: dict | None, defaults: dict, what: str) -> dict:
    """``{**defaults, **cfg}``; unknown keys, and fit options outside TRAIN_RANGES, raise
    ``ValueError`` naming them."""
    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(defaults))
    if unknown:
        raise ValueError(f"unknown {what} option(s): {', '.join(unknown)}; accepted: "
                         f"{', '.join(sorted(defaults))}")
    out = {**copy.deepcopy(defaults), **cfg}
    check_ranges(out, {k: r for k, r in TRAIN_RANGES.items() if k in out})
    return out




def previous_rows(obs: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each row's previous row in its episode (``groups``: rows of an episode consecutive and in
    order, as :func:`taigym.data.transitions` gives them), the row itself at an episode's start."""
    g = np.asarray(groups)
    idx = np.arange(len(g))
    first = np.r_[True, g[1:] != g[:-1]] if len(g) else np.zeros(0, bool)
    return np.asarray(obs)[np.where(first, idx, idx - 1)]


def split_by_group(groups: np.ndarray, val_fraction: float, rng: np.random.Generator):
    """Indices (train, val): whole episodes (``groups``) go to validation, at least one when
    there are two or more; with a single episode, a random ``val_fraction`` of its steps."""
    n = len(groups)
    uniq = np.unique(groups)
    if val_fraction <= 0 or n < 2:
        return np.arange(n), np.arange(0)
    if len(uniq) >= 2:
        k = min(max(int(round(val_fraction * len(uniq))), 1), len(uniq) - 1)
        val_groups = rng.choice(uniq, size=k, replace=False)
        val = np.isin(groups, val_groups)
    else:
        val = np.zeros(n, bool)
        val[rng.choice(n, size=max(1, int(round(val_fraction * n))), replace=False)] = True
    return np.flatnonzero(~val), np.flatnonzero(val)


def stable_split_by_group(groups: np.ndarray, val_fraction: float, seed: int):
    """Indices (train, val) where each episode (``groups``: 0, 1, ... in the order episodes were
    gathered) goes to validation with probability ``val_fraction`` by its own draw from ``seed``'s
    stream, so that gathering more episodes never moves an episode between train and val: a
    warm-started refit (DAgger's rounds) is then validated on episodes it never trained on."""
    groups = np.asarray(groups)
    if val_fraction <= 0 or len(groups) < 2 or len(np.unique(groups)) < 2:
        return split_by_group(groups, val_fraction, np.random.default_rng(seed))
    draws = np.random.default_rng(seed).random(int(groups.max()) + 1)   # prefix-stable in the count
    val = draws[groups] < val_fraction
    if not val.any() or val.all():
        return split_by_group(groups, val_fraction, np.random.default_rng(seed))
    return np.flatnonzero(~val), np.flatnonzero(val)


class Fit:
    """Resumable state of one supervised fit: call :meth:`run` (it returns when it stops early,
    reaches ``max_epochs``, or after ``stop_after`` more epochs), then :meth:`finalise` for the
    best weights; :meth:`state_dict` / :meth:`load_state_dict` round-trip everything (current
    and best weights, optimizer, RNG), so that a fit resumed from a checkpoint continues exactly
    as if it had not been interrupted. ``split_seed``: validation episodes drawn with
    :func:`stable_split_by_group` (the same across refits on growing data) instead of by ``seed``.
    ``split_groups``: per row, the group whose side of the split it takes (default ``groups``,
    its episode; a perturbed replay's: its demonstration's)."""

    def __init__(self, policy: MLPPolicy, obs: np.ndarray, act: np.ndarray, groups: np.ndarray,
                 cfg: dict, *, seed: int, renormalise: bool = True, start: np.ndarray | None = None,
                 split_seed: int | None = None, split_groups: np.ndarray | None = None):
        self.policy, self.cfg = policy, cfg
        self.obs = policy.featurize(obs, start, previous_rows(obs, groups))
        self.act = np.asarray(act, np.float32)
        self.rng = np.random.default_rng(seed)
        sides = np.asarray(groups if split_groups is None else split_groups)
        if split_seed is None:
            self.train_idx, self.val_idx = split_by_group(sides, cfg["val_fraction"], self.rng)
        else:
            self.train_idx, self.val_idx = stable_split_by_group(sides, cfg["val_fraction"], split_seed)
        if renormalise:
            policy.set_normalisation(self.obs[self.train_idx])
            policy.set_action_scale(self.obs[self.train_idx], self.act[self.train_idx])
        self.act = policy.limit_labels(self.obs, self.act)
        # the loss in units of the network's outputs (1 unless it predicts scaled velocity changes)
        self.inv_scale = 1.0 / policy.action_scale()
        self.opt = torch.optim.Adam(policy.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
        self.epoch, self.bad_epochs, self.done, self.reason = 0, 0, False, ""
        self.best_val, self.best_state = math.inf, copy.deepcopy(policy.state_dict())
        # the weights' moving average (None: off): validated, early-stopped on and returned
        self.ema = copy.deepcopy(policy) if float(cfg.get("ema_epochs") or 0.0) > 0 else None
        self.history: list[dict] = []
        self.torch_gen = torch.Generator().manual_seed(int(seed))

    # -- persistence
    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "bad_epochs": self.bad_epochs, "done": self.done, "reason": self.reason,
                "best_val": self.best_val, "best_state": self.best_state,
                "model": self.policy.state_dict(), "opt": self.opt.state_dict(),
                "rng": self.rng.bit_generator.state, "torch_gen": self.torch_gen.get_state(),
                "history": self.history, "ema": None if self.ema is None else self.ema.state_dict(),
                "train_idx": self.train_idx, "val_idx": self.val_idx}

    def load_state_dict(self, s: dict) -> None:
        self.epoch, self.bad_epochs, self.done = s["epoch"], s["bad_epochs"], s["done"]
        self.reason = s.get("reason", "")
        if self.done and self.reason == "max_epochs" and self.epoch < int(self.cfg["max_epochs"]):
            self.done, self.reason = False, ""      # resumed with a larger epoch budget
        self.best_val, self.best_state = s["best_val"], s["best_state"]
        self.policy.load_state_dict(s["model"])
        self.opt.load_state_dict(s["opt"])
        self.rng.bit_generator.state = s["rng"]
        if "torch_gen" in s:
            self.torch_gen.set_state(s["torch_gen"])
        self.history = list(s["history"])
        if self.ema is not None:
            self.ema.load_state_dict(s["ema"] if s.get("ema") is not None else s["model"])
        self.train_idx, self.val_idx = s["train_idx"], s["val_idx"]

    # -- training
    @property
    def validated(self) -> MLPPolicy:
        """The weights that are validated and returned: the moving average, or the last weights."""
        return self.policy if self.ema is None else self.ema

    def _loss(self, idx: np.ndarray) -> float:
        if len(idx) == 0:
            return math.nan
        with torch.no_grad():
            pred = self.validated(torch.as_tensor(self.obs[idx]))
            return float((((pred - torch.as_tensor(self.act[idx])) * self.inv_scale) ** 2).mean())

    def run(self, *, stop_after: int | None = None,
            on_epoch: Callable[[dict], None] | None = None) -> bool:
        """Train until done (returns True) or ``stop_after`` epochs ran (returns False)."""
        cfg = self.cfg
        ran = 0
        old_threads = torch.get_num_threads()
        torch.set_num_threads(max(int(cfg["threads"]), 1))
        try:
            while not self.done:
                if stop_after is not None and ran >= stop_after:
                    return False
                self.policy.train()
                perm = self.rng.permutation(self.train_idx)
                bs = max(int(cfg["batch_size"]), 1)
                if self.ema is not None:  # per minibatch: time constant ema_epochs x an epoch's minibatches
                    decay = math.exp(-1.0 / (float(cfg["ema_epochs"]) * math.ceil(len(perm) / bs)))
                noise = float(cfg.get("input_noise") or 0.0)
                total, count = 0.0, 0
                for i in range(0, len(perm), bs):
                    idx = perm[i:i + bs]
                    x, y = torch.as_tensor(self.obs[idx]), torch.as_tensor(self.act[idx])
                    clean = x
                    if noise > 0:            # in units of each input's std (the normalisation's)
                        x = x + noise * self.policy.obs_std * torch.randn(x.shape, generator=self.torch_gen)
                    # the members' MSEs summed: each member's gradient is the one it would get alone
                    # (averaged, Adam's weight decay would weigh K times more against it); noise on
                    # the network's inputs only, not on the velocity an output is added to
                    pred = self.policy.forward_members(x, clean=clean)
                    loss = (((pred - y) * self.inv_scale) ** 2).mean(dim=(1, 2)).sum()
                    self.opt.zero_grad(set_to_none=True)
                    loss.backward()
                    self.opt.step()
                    if self.ema is not None:
                        with torch.no_grad():
                            for avg, w in zip(self.ema.parameters(), self.policy.parameters()):
                                avg.lerp_(w, 1.0 - decay)
                    total += float(loss.detach()) / self.policy.members * len(idx)
                    count += len(idx)
                self.policy.eval()
                self.epoch += 1
                ran += 1
                val = self._loss(self.val_idx)
                score = val if len(self.val_idx) else total / max(count, 1)
                if score < self.best_val - 1e-12:
                    self.best_val, self.bad_epochs = score, 0
                    self.best_state = copy.deepcopy(self.validated.state_dict())
                else:
                    self.bad_epochs += 1
                row = {"epoch": self.epoch, "train_loss": total / max(count, 1), "val_loss": val}
                self.history.append(row)
                if on_epoch is not None:
                    on_epoch(row)
                if self.bad_epochs >= int(cfg["patience"]):
                    self.done, self.reason = True, "patience"
                elif self.epoch >= int(cfg["max_epochs"]):
                    self.done, self.reason = True, "max_epochs"
            return True
        finally:
            torch.set_num_threads(old_threads)

    def finalise(self) -> MLPPolicy:
        """Load the best weights (lowest validation loss; of the moving average with ``ema_epochs``)
        into the policy and return it.
        (Checkpoint with :meth:`state_dict` before: it keeps the last weights for resuming.)"""
        self.policy.load_state_dict(self.best_state)
        self.policy.eval()
        return self.policy


def seed_everything(seed: int) -> None:
    torch.manual_seed(int(seed))


__all__ = ["TRAIN_DEFAULTS", "TRAIN_RANGES", "Fit", "check_cfg", "seed_everything", "split_by_group",
           "stable_split_by_group"]
