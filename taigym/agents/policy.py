"""A small deterministic MLP policy (torch, CPU) with observation normalisation, shared by
``bc`` and ``dagger``.

* :class:`MLPPolicy`: ``obs -> features -> mask * (x - mean) / std -> [Linear, ReLU] x
  len(hidden) -> Linear``, or the mean of ``members`` such MLPs (an ensemble: independent
  initialisations, trained on the same minibatches, each on its own MSE); the features
  (:mod:`taigym.agents.features`, NumPy, applied by :meth:`MLPPolicy.featurize` before the
  torch forward pass) append T's predicted path relative to S and S's start pose on Pour-v0;
  the normalisation statistics and the mask (0 for the ``ignore_obs`` entries) are buffers
  (saved with the weights). Ignoring S's velocity
  and the older heightfield frames keeps a cloned policy from copying its own last action from
  them (the "copycat" shortcut: a low validation loss and a policy that drifts in closed
  loop). Actions are regressed unsquashed and clipped to the action box when acting.
* :class:`PolicyAgent`: the agent around a policy (``reset``, ``act``, ``save``, ``load``).
  ``act`` runs the forward pass in NumPy on a float32 copy of the weights (no torch dispatch:
  ~20 us per decision), so its latency is the policy's, not the framework's.
* :func:`fit`: supervised regression (MSE, Adam, minibatches, early stopping on a validation
  split) with a resumable state, used by ``bc`` (one fit) and ``dagger`` (one fit per round,
  warm-started). With ``ema_epochs`` > 0 it validates and returns an exponential moving average
  of the weights (Polyak averaging) instead of the last weights: the closed-loop success of the
  raw weights swings from epoch to epoch (round 0 of DAgger on 950 demonstrations, warm-started
  refit, 200 validation tasks every 3 epochs: 0.705-0.85), that of their average does not
  (0.82-0.86; README).

Everything is seeded: the same data, configuration and seed give the same weights.
"""

from __future__ import annotations

import copy
import io
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from . import features as _features
from .base import Agent, check_ranges

#: hyperparameters of the network and of :func:`fit` (shared by ``bc`` and ``dagger``)
TRAIN_DEFAULTS: dict[str, Any] = dict(
    hidden=[256, 256],      # widths of the hidden layers
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

STD_FLOOR = 1e-2            # normalisation: minimum std of an input (constant features)
CLIP_NORMALISED = 10.0      # normalised inputs are clipped to +-10 (states far off the data)


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


def flat_obs_dim(space) -> int:
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"the MLP policy needs a flat Box observation (obs_mode='features' or 'lip'), "
                         f"got {space}")
    return int(space.shape[0])


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def torch_save_atomic(obj, path: str | Path) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def torch_load(path: str | Path):
    return torch.load(path, map_location="cpu", weights_only=False)


class MLPPolicy(nn.Module):
    """``obs -> action`` MLP with input normalisation buffers ``obs_mean``, ``obs_std``.
    ``obs_dim`` is the env's observation size; ``features`` a spec of
    :mod:`taigym.agents.features` (None: the observation alone). :meth:`forward` takes
    featurized inputs (``in_dim`` entries): call :meth:`featurize` on observations first."""

    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256), ignore_obs=(), features: dict | None = None,
                 members: int = 1):
        super().__init__()
        ignore = [int(i) for i in ignore_obs]
        if any(not 0 <= i < int(obs_dim) for i in ignore):
            raise ValueError(f"ignore_obs must hold indices in [0, {int(obs_dim) - 1}], got {list(ignore_obs)}")
        if not (isinstance(members, int) and members >= 1):
            raise ValueError(f"members must be an integer >= 1, got {members!r}")
        self.obs_dim, self.act_dim, self.hidden = int(obs_dim), int(act_dim), [int(h) for h in hidden]
        self.members = int(members)
        self.features = dict(features or {"kind": "none"})
        self.in_dim = self.obs_dim + _features.extra_dim(self.features)

        def mlp() -> nn.Sequential:
            layers: list[nn.Module] = []
            last = self.in_dim
            for h in self.hidden:
                layers += [nn.Linear(last, h), nn.ReLU()]
                last = h
            layers.append(nn.Linear(last, self.act_dim))
            return nn.Sequential(*layers)

        self.nets = nn.ModuleList([mlp() for _ in range(self.members)])
        self.register_buffer("obs_mean", torch.zeros(self.in_dim))
        self.register_buffer("obs_std", torch.ones(self.in_dim))
        mask = torch.ones(self.in_dim)
        mask[ignore] = 0.0
        self.register_buffer("obs_mask", mask)

    def featurize(self, obs: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """Observations (n, obs_dim) or (obs_dim,) -> the network's inputs (float32); ``start``:
        each row's episode's first observation (features with ``start_pose``)."""
        return _features.featurize(obs, self.features, start)

    def set_normalisation(self, obs: np.ndarray) -> None:
        """From featurized inputs (n, in_dim)."""
        obs = np.asarray(obs, np.float64)
        self.obs_mean.copy_(torch.as_tensor(obs.mean(0), dtype=torch.float32))
        self.obs_std.copy_(torch.as_tensor(np.maximum(obs.std(0), STD_FLOOR), dtype=torch.float32))

    def forward_members(self, obs: torch.Tensor) -> torch.Tensor:
        """Each member's action, (members, n, act_dim)."""
        x = ((obs - self.obs_mean) / self.obs_std).clamp(-CLIP_NORMALISED, CLIP_NORMALISED) * self.obs_mask
        return torch.stack([net(x) for net in self.nets])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.forward_members(obs).mean(0)

    def numpy_params(self) -> dict:
        """A picklable float64 copy of everything the forward pass needs (for NumPy inference):
        per layer, the members' weights stacked, ``W`` (members, in, out) and ``b`` (members, 1, out)."""
        lins = [[m for m in net if isinstance(m, nn.Linear)] for net in self.nets]
        return {"mean": self.obs_mean.double().numpy().copy(), "std": self.obs_std.double().numpy().copy(),
                "mask": self.obs_mask.double().numpy().copy(), "features": copy.deepcopy(self.features),
                "W": [np.stack([lin[i].weight.detach().double().numpy().T for lin in lins])
                      for i in range(len(lins[0]))],
                "b": [np.stack([lin[i].bias.detach().double().numpy()[None] for lin in lins])
                      for i in range(len(lins[0]))]}


class NumpyPolicy:
    """The forward pass of :class:`MLPPolicy` in NumPy (fast per-decision inference, picklable).
    It keeps the first observation after :meth:`reset` (the episode's start, an input of
    features with ``start_pose``): call ``reset`` at every episode's start."""

    def __init__(self, params: dict, low=-1.0, high=1.0):
        # float32 like the torch module (the matrix products take 2/3 of float64's time: 5 members
        # of [256, 256] 51 us instead of 86 us a decision)
        self.p = {k: ([np.asarray(w, np.float32) for w in v] if k in ("W", "b") else
                      np.asarray(v, np.float32) if k in ("mean", "std", "mask") else v) for k, v in params.items()}
        self.low, self.high = low, high
        self.start = self.start_part = None

    def reset(self) -> None:
        self.start = self.start_part = None

    def __call__(self, obs) -> np.ndarray:
        p = self.p
        obs = np.asarray(obs).ravel()
        if self.start is None:             # the episode's start: its features are computed once
            self.start = obs.copy()
            self.start_part = _features.start_features(self.start, p.get("features"))
        obs = _features.featurize(obs, p.get("features"), self.start, start_part=self.start_part)
        x = np.clip((np.asarray(obs, np.float32) - p["mean"]) / p["std"], -CLIP_NORMALISED,
                    CLIP_NORMALISED) * p["mask"]
        x = x[None, None]                # (1, 1, in): broadcast over the members
        n = len(p["W"])
        for i, (W, b) in enumerate(zip(p["W"], p["b"])):
            x = x @ W + b                # (members, 1, in) @ (members, in, out) -> (members, 1, out)
            if i < n - 1:
                np.maximum(x, 0.0, out=x)
        return np.clip(x.mean(axis=(0, 1)), self.low, self.high).astype(np.float32)


class PolicyAgent(Agent):
    """An agent acting with an :class:`MLPPolicy` (deterministic). ``make(name, env,
    checkpoint=path)`` loads a saved policy; without ``checkpoint`` the policy is untrained."""

    name = "policy"

    def __init__(self, env, *, checkpoint: str | Path | None = None, policy: MLPPolicy | None = None,
                 hidden=None, meta: dict | None = None, **cfg):
        if cfg:
            raise ValueError(f"unknown {self.name}-agent option(s): {', '.join(sorted(cfg))}; accepted: "
                             f"checkpoint, hidden")
        super().__init__(env)
        self.meta = dict(meta or {})
        if checkpoint is not None:
            if policy is not None:
                raise ValueError("give checkpoint or policy, not both")
            policy, meta = _read_policy(checkpoint)
            self.meta.update(meta)
        if policy is None:
            obs_dim = flat_obs_dim(env.observation_space)
            hidden = TRAIN_DEFAULTS["hidden"] if hidden is None else hidden
            policy = MLPPolicy(obs_dim, int(np.prod(env.action_space.shape)), hidden)
        elif hidden is not None and list(hidden) != policy.hidden:
            raise ValueError(f"hidden={hidden} does not match the policy's {policy.hidden}")
        self.policy = policy
        self.cfg = {"hidden": list(policy.hidden)} | ({"checkpoint": str(checkpoint)} if checkpoint else {})
        self._check_spaces(env)
        self.refresh()

    def _check_spaces(self, env) -> None:
        obs_dim = flat_obs_dim(env.observation_space)
        if obs_dim != self.policy.obs_dim:
            raise ValueError(f"the policy takes {self.policy.obs_dim} observation entries, the env gives "
                             f"{obs_dim} (another obs_mode?)")
        act_dim = int(np.prod(env.action_space.shape))
        if act_dim != self.policy.act_dim:
            raise ValueError(f"the policy gives {self.policy.act_dim} actions, the env takes {act_dim}")

    def refresh(self) -> None:
        """Re-read the torch weights into the NumPy forward pass (after training)."""
        space = self.env.action_space
        self._np = NumpyPolicy(self.policy.numpy_params(), space.low, space.high)

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._np.reset()

    def act(self, obs, info: dict) -> np.ndarray:
        return self._np(obs)

    def act_batch(self, obs: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """Actions for rows of observations (no episode state: ``start``, each row's episode's
        first observation, defaults to the rows themselves)."""
        obs = np.asarray(obs, np.float32)
        with torch.no_grad():
            out = self.policy(torch.as_tensor(self.policy.featurize(obs, obs if start is None else start)))
        space = self.env.action_space
        return np.clip(out.numpy(), space.low, space.high)

    def save(self, path: str | Path) -> None:
        """Write the policy (architecture, weights, normalisation, ``meta``) atomically."""
        torch_save_atomic({"format": "taigym-mlp-policy/1", "agent": self.name,
                           "obs_dim": self.policy.obs_dim, "act_dim": self.policy.act_dim,
                           "hidden": self.policy.hidden, "features": self.policy.features,
                           "members": self.policy.members,
                           "state_dict": self.policy.state_dict(),
                           "meta": self.meta}, path)

    @classmethod
    def load(cls, path: str | Path, env) -> "PolicyAgent":
        policy, meta = _read_policy(path)
        return cls(env, policy=policy, meta=meta)


def _read_policy(path: str | Path) -> tuple[MLPPolicy, dict]:
    d = torch_load(path)
    if not isinstance(d, dict) or d.get("format") != "taigym-mlp-policy/1":
        raise ValueError(f"{path} is not a saved taigym MLP policy")
    state = dict(d["state_dict"])
    state.setdefault("obs_mask", torch.ones(d["obs_dim"]))          # saved before ignore_obs existed
    state = {("nets.0." + k[4:] if k.startswith("net.") else k): v for k, v in state.items()}  # before members
    policy = MLPPolicy(d["obs_dim"], d["act_dim"], d["hidden"], features=d.get("features"),  # None: before features
                       members=int(d.get("members", 1)))
    policy.load_state_dict(state)
    policy.eval()
    return policy, dict(d.get("meta", {}))


# ---------------------------------------------------------------------------------------- fit
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
    :func:`stable_split_by_group` (the same across refits on growing data) instead of by ``seed``."""

    def __init__(self, policy: MLPPolicy, obs: np.ndarray, act: np.ndarray, groups: np.ndarray,
                 cfg: dict, *, seed: int, renormalise: bool = True, start: np.ndarray | None = None,
                 split_seed: int | None = None):
        self.policy, self.cfg = policy, cfg
        self.obs = policy.featurize(obs, start)
        self.act = np.asarray(act, np.float32)
        self.rng = np.random.default_rng(seed)
        if split_seed is None:
            self.train_idx, self.val_idx = split_by_group(np.asarray(groups), cfg["val_fraction"], self.rng)
        else:
            self.train_idx, self.val_idx = stable_split_by_group(groups, cfg["val_fraction"], split_seed)
        if renormalise:
            policy.set_normalisation(self.obs[self.train_idx])
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
            return float(((pred - torch.as_tensor(self.act[idx])) ** 2).mean())

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
                    if noise > 0:            # in units of each input's std (the normalisation's)
                        x = x + noise * self.policy.obs_std * torch.randn(x.shape, generator=self.torch_gen)
                    # the members' MSEs summed: each member's gradient is the one it would get alone
                    # (averaged, Adam's weight decay would weigh K times more against it)
                    loss = ((self.policy.forward_members(x) - y) ** 2).mean(dim=(1, 2)).sum()
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
