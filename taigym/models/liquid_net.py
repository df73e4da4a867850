"""Pan & Manocha 2017's liquid-parameter network (Pan & Manocha 2017, §VI, Fig. 3).

A 4-layer MLP, 32 ReLU units per hidden layer, maps an observation of the liquid (the
heightfield of the past 4 frames, or the liquid height at S's lips) together with both
containers' configurations (here: the whole Pour-v0 ``features`` / ``lip`` observation vector,
which holds S's and T's poses and velocities) to

* the outflow parabola: its start p = (p_x, p_y) and the jet's velocity (v_x, v_y), both in S's
  frame (so they move with S's candidate poses in the planner), and the outflow flux rho
  (fraction of the liquid leaving S per second): a linear output layer;
* the mean-trajectory prior S' as the monotone coordinates (alpha, beta, gamma) in (0, 1]: how
  much S's gaps to T's opening (x, y) and to the final lean shrink over the planning horizon:
  a sigmoid output layer (the paper's choice: these fit its range).

Training (:func:`fit`): MSE on standardised targets; p and v only count where liquid flows
(rho > 0: elsewhere the parabola does not exist), rho everywhere, the ratios wherever labelled
(NaN: none, as in the ``rh`` rollouts of ``taigym.data.cmaes_dataset.generate_onpolicy``);
Adam, minibatches, the best epoch on a held-out part of the problems kept. Torch on the CPU,
deterministic for a seed. :meth:`LiquidNet.numpy_predictor` gives a NumPy forward pass (tens of
microseconds), which the receding-horizon agent calls every step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

N_LINEAR = 5          #: p_x, p_y, v_x, v_y, rho
N_PRIOR = 3           #: alpha, beta, gamma
N_OUT = N_LINEAR + N_PRIOR


class LiquidNet(nn.Module):
    """obs (N, D) -> (outflow (N, 5): p_x, p_y, v_x, v_y, rho in SI units; prior (N, 3))."""

    def __init__(self, in_dim: int, hidden: int = 32, layers: int = 4):
        super().__init__()
        self.in_dim, self.hidden, self.layers = int(in_dim), int(hidden), int(layers)
        mods, d = [], self.in_dim
        for _ in range(self.layers):
            mods += [nn.Linear(d, self.hidden), nn.ReLU()]
            d = self.hidden
        self.body = nn.Sequential(*mods)
        self.head = nn.Linear(d, N_OUT)
        self.register_buffer("x_mean", torch.zeros(self.in_dim))
        self.register_buffer("x_std", torch.ones(self.in_dim))
        self.register_buffer("y_mean", torch.zeros(N_LINEAR))
        self.register_buffer("y_std", torch.ones(N_LINEAR))

    def raw(self, obs: torch.Tensor) -> torch.Tensor:
        """Standardised linear outputs and prior logits (N, 8)."""
        return self.head(self.body((obs - self.x_mean) / self.x_std))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.raw(obs)
        return z[:, :N_LINEAR] * self.y_std + self.y_mean, torch.sigmoid(z[:, N_LINEAR:])

    def numpy_predictor(self):
        """A function obs (D,) -> (outflow (5,), prior (3,)) in NumPy (float64)."""
        layers = [(m.weight.detach().double().numpy().T.copy(), m.bias.detach().double().numpy().copy())
                  for m in list(self.body) + [self.head] if isinstance(m, nn.Linear)]
        xm, xs = self.x_mean.double().numpy().copy(), self.x_std.double().numpy().copy()
        ym, ys = self.y_mean.double().numpy().copy(), self.y_std.double().numpy().copy()
        hidden, (wo, bo) = layers[:-1], layers[-1]

        def predict(obs: np.ndarray):
            h = (np.asarray(obs, np.float64) - xm) / xs
            for w, b in hidden:
                h = np.maximum(h @ w + b, 0.0)
            z = h @ wo + bo
            return z[:N_LINEAR] * ys + ym, 1.0 / (1.0 + np.exp(-z[N_LINEAR:]))

        return predict

    def config(self) -> dict:
        return {"in_dim": self.in_dim, "hidden": self.hidden, "layers": self.layers}


@dataclass(frozen=True)
class FitConfig:
    epochs: int = 300
    lr: float = 3e-3
    batch_size: int = 256
    weight_decay: float = 0.0
    val_fraction: float = 0.15      #: fraction of the problems held out (best epoch kept)
    prior_weight: float = 10.0      #: weight of the ratios' MSE (they live in (0, 1])
    seed: int = 0
    hidden: int = 32
    layers: int = 4


def _targets(labels: np.ndarray):
    y = np.asarray(labels, np.float64)
    flowing = y[:, 4] > 0.0
    return y, flowing


def _loss(net: LiquidNet, x, y, flow, cfg: FitConfig) -> torch.Tensor:
    z = net.raw(x)
    ys = (y[:, :N_LINEAR] - net.y_mean) / net.y_std
    err = (z[:, :N_LINEAR] - ys) ** 2
    pv = (err[:, :4].sum(1) * flow).sum() / flow.sum().clamp(min=1.0) / 4.0
    rho = err[:, 4].mean()
    known = ~torch.isnan(y[:, N_LINEAR:])             # NaN: no prior label (rh's own rollouts)
    sq = (torch.sigmoid(z[:, N_LINEAR:]) - torch.nan_to_num(y[:, N_LINEAR:])) ** 2
    prior = (sq * known).sum() / known.sum().clamp(min=1)
    return pv + rho + cfg.prior_weight * prior


def _rms_known(err: np.ndarray) -> float:
    """RMS over the labelled entries (NaN labels left out; NaN if none)."""
    err = err[~np.isnan(err)]
    return float(np.sqrt(np.mean(err ** 2))) if err.size else math.nan


def errors(net: LiquidNet, obs: np.ndarray, labels: np.ndarray) -> dict:
    """RMS errors in label units: ``outflow`` (p, v over flowing states), ``rho``, ``prior``."""
    y, flow = _targets(labels)
    with torch.no_grad():
        lin, prior = net(torch.as_tensor(obs, dtype=torch.float32))
    lin, prior = lin.double().numpy(), prior.double().numpy()
    out = {"rho": float(np.sqrt(np.mean((lin[:, 4] - y[:, 4]) ** 2))),
           "prior": _rms_known(prior - y[:, N_LINEAR:])}
    out["outflow"] = float(np.sqrt(np.mean((lin[flow, :4] - y[flow, :4]) ** 2))) if flow.any() else 0.0
    return out


def constant_errors(obs: np.ndarray, labels: np.ndarray, train_labels: np.ndarray) -> dict:
    """The same errors for the best constant predictor (the training labels' means)."""
    y, flow = _targets(labels)
    ty, tflow = _targets(train_labels)
    m_pv = ty[tflow, :4].mean(0) if tflow.any() else np.zeros(4)
    out = {"rho": float(np.sqrt(np.mean((ty[:, 4].mean() - y[:, 4]) ** 2))),
           "prior": _rms_known(np.nanmean(ty[:, N_LINEAR:], 0) - y[:, N_LINEAR:])}
    out["outflow"] = float(np.sqrt(np.mean((m_pv - y[flow, :4]) ** 2))) if flow.any() else 0.0
    return out


def fit(obs: np.ndarray, labels: np.ndarray, groups: np.ndarray | None = None,
        cfg: FitConfig | None = None, progress: bool = False) -> tuple[LiquidNet, dict]:
    """Train a :class:`LiquidNet` on (obs, labels); ``groups`` (a problem index per state) keeps
    each problem's states on one side of the train/validation split. Returns (net, report)."""
    cfg = cfg or FitConfig()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    obs = np.asarray(obs, np.float64)
    y, flow = _targets(labels)
    groups = np.arange(len(obs)) if groups is None else np.asarray(groups)
    ids = np.unique(groups)
    n_val = int(round(cfg.val_fraction * len(ids))) if len(ids) > 2 else 0
    val_ids = rng.permutation(ids)[:n_val]
    val = np.isin(groups, val_ids)
    tr = ~val
    net = LiquidNet(obs.shape[1], cfg.hidden, cfg.layers)
    x_std = obs[tr].std(0)
    net.x_mean.copy_(torch.as_tensor(obs[tr].mean(0), dtype=torch.float32))
    net.x_std.copy_(torch.as_tensor(np.where(x_std > 1e-6, x_std, 1.0), dtype=torch.float32))
    ftr = tr & flow
    ym = np.concatenate([y[ftr, :4].mean(0) if ftr.any() else np.zeros(4), [y[tr, 4].mean()]])
    ys = np.concatenate([y[ftr, :4].std(0) if ftr.sum() > 1 else np.ones(4), [y[tr, 4].std()]])
    net.y_mean.copy_(torch.as_tensor(ym, dtype=torch.float32))
    net.y_std.copy_(torch.as_tensor(np.where(ys > 1e-6, ys, 1.0), dtype=torch.float32))

    X = torch.as_tensor(obs, dtype=torch.float32)
    Y = torch.as_tensor(y, dtype=torch.float32)
    F = torch.as_tensor(flow, dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    tr_idx = np.flatnonzero(tr)
    val_idx = torch.as_tensor(np.flatnonzero(val if val.any() else tr))
    best, best_state, history = math.inf, None, []
    for epoch in range(cfg.epochs):
        perm = rng.permutation(tr_idx)
        for k in range(0, len(perm), cfg.batch_size):
            b = torch.as_tensor(perm[k:k + cfg.batch_size])
            loss = _loss(net, X[b], Y[b], F[b], cfg)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            v = float(_loss(net, X[val_idx], Y[val_idx], F[val_idx], cfg))
        history.append(v)
        if v < best:
            best, best_state = v, {k: t.clone() for k, t in net.state_dict().items()}
        if progress and (epoch + 1) % 50 == 0:
            print(f"  epoch {epoch + 1}/{cfg.epochs}: validation loss {v:.4f} (best {best:.4f})", flush=True)
    net.load_state_dict(best_state)
    net.eval()
    report = {"val_loss": best, "history": history, "train_states": int(tr.sum()),
              "val_states": int(val.sum()), "config": asdict(cfg)}
    if val.any():
        report["val_errors"] = errors(net, obs[val], y[val])
        report["val_constant_errors"] = constant_errors(obs[val], y[val], y[tr])
    return net, report
