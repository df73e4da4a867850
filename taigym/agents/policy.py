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
* atomic checkpoint files (:func:`torch_save_atomic`, :func:`atomic_write_bytes`).

The policy is trained by :mod:`taigym.training.fit` (for ``bc`` and ``dagger``).
"""

from __future__ import annotations

import copy
import io
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from .base import Agent
from .features import action_scale, extra_dim, featurize, fit_action_scale, limit_labels, net_dim, output, \
    replaced_inputs, start_features

DEFAULT_HIDDEN = [256, 256]  # widths of the hidden layers
STD_FLOOR = 1e-2            # normalisation: minimum std of an input (constant features)
CLIP_NORMALISED = 10.0      # normalised inputs are clipped to +-10 (states far off the data)


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
        self.in_dim = self.obs_dim + extra_dim(self.features)

        def mlp() -> nn.Sequential:
            layers: list[nn.Module] = []
            last = self.in_dim
            for h in self.hidden:
                layers += [nn.Linear(last, h), nn.ReLU()]
                last = h
            layers.append(nn.Linear(last, net_dim(self.features, self.act_dim)))
            return nn.Sequential(*layers)

        self.nets = nn.ModuleList([mlp() for _ in range(self.members)])
        self.register_buffer("obs_mean", torch.zeros(self.in_dim))
        self.register_buffer("obs_std", torch.ones(self.in_dim))
        mask = torch.ones(self.in_dim)
        mask[ignore + replaced_inputs(self.features)] = 0.0
        self.register_buffer("obs_mask", mask)

    def featurize(self, obs: np.ndarray, start: np.ndarray | None = None,
                  prev: np.ndarray | None = None) -> np.ndarray:
        """Observations (n, obs_dim) or (obs_dim,) -> the network's inputs (float32); ``start``:
        each row's episode's first observation (features with ``start_pose``); ``prev``: the
        observation before each row in its episode (Transport's velocity change)."""
        return featurize(obs, self.features, start, prev=prev)

    def set_action_scale(self, inputs: np.ndarray, actions: np.ndarray) -> None:
        """From featurized inputs (n, in_dim) and their actions (features.fit_action_scale)."""
        fit_action_scale(self.features, inputs, actions)

    def limit_labels(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """The labels of featurized ``inputs`` a fit regresses (features.limit_labels)."""
        return limit_labels(self.features, inputs, actions)

    def action_scale(self) -> torch.Tensor:
        """(act_dim,): the scale of the fit's loss (it divides the actions' errors by it); 1 for
        Pour3D-v0's ``"plan"``, whose outputs are not actions."""
        if self.features.get("kind") == "plan":
            return torch.ones(self.act_dim)
        scale = np.broadcast_to(action_scale(self.features), (self.act_dim,))
        return torch.as_tensor(scale.copy(), dtype=torch.float32)

    def set_normalisation(self, obs: np.ndarray) -> None:
        """From featurized inputs (n, in_dim)."""
        obs = np.asarray(obs, np.float64)
        self.obs_mean.copy_(torch.as_tensor(obs.mean(0), dtype=torch.float32))
        self.obs_std.copy_(torch.as_tensor(np.maximum(obs.std(0), STD_FLOOR), dtype=torch.float32))

    def forward_members(self, obs: torch.Tensor, clean: torch.Tensor | None = None) -> torch.Tensor:
        """Each member's action, (members, n, act_dim); ``clean``: the inputs without the
        training noise in ``obs`` (what an output relative to the observed velocity adds to)."""
        x = ((obs - self.obs_mean) / self.obs_std).clamp(-CLIP_NORMALISED, CLIP_NORMALISED) * self.obs_mask
        out = torch.stack([net(x) for net in self.nets])
        return output(self.features, (obs if clean is None else clean).detach().numpy(), out)

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
    features with ``start_pose``) and the last one (Transport's velocity change): call
    ``reset`` at every episode's start."""

    def __init__(self, params: dict, low=-1.0, high=1.0):
        # float32 like the torch module (the matrix products take 2/3 of float64's time: 5 members
        # of [256, 256] 51 us instead of 86 us a decision)
        self.p = {k: ([np.asarray(w, np.float32) for w in v] if k in ("W", "b") else
                      np.asarray(v, np.float32) if k in ("mean", "std", "mask") else v) for k, v in params.items()}
        self.low, self.high = low, high
        self.start = self.start_part = self.prev = None

    def reset(self) -> None:
        self.start = self.start_part = self.prev = None

    def __call__(self, obs) -> np.ndarray:
        p = self.p
        obs = np.asarray(obs).ravel()
        if self.start is None:             # the episode's start: its features are computed once
            self.start = obs.copy()
            self.start_part = start_features(self.start, p.get("features"))
        raw, prev, self.prev = obs, self.prev, obs.copy()
        obs = featurize(raw, p.get("features"), self.start, start_part=self.start_part, prev=prev)
        x = np.clip((np.asarray(obs, np.float32) - p["mean"]) / p["std"], -CLIP_NORMALISED,
                    CLIP_NORMALISED) * p["mask"]
        x = x[None, None]                # (1, 1, in): broadcast over the members
        n = len(p["W"])
        for i, (W, b) in enumerate(zip(p["W"], p["b"])):
            x = x @ W + b                # (members, 1, in) @ (members, in, out) -> (members, 1, out)
            if i < n - 1:
                np.maximum(x, 0.0, out=x)
        out = output(p.get("features"), obs, x.mean(axis=(0, 1)))
        return np.clip(out, self.low, self.high).astype(np.float32)


class PolicyAgent(Agent):
    """An agent acting with an :class:`MLPPolicy` (deterministic). ``make(name, env,
    checkpoint=path)`` loads a saved policy; without ``checkpoint`` the policy is untrained."""

    name = "policy"
    needs_checkpoint = True

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
            hidden = DEFAULT_HIDDEN if hidden is None else hidden
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
