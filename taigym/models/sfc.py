"""The SFRRT* paper's spill-free classifier (SFC): a small transformer over the container's trajectory,
with the container properties concatenated after the encoder (Fig. 3), labelled here by the
particle simulator instead of motion capture.

Two kinds of trajectory, each with its own trained network (the ``kind`` in its config):

* ``"planar"`` (``taigym/Transport-v0``): poses (x, z, tilt); :func:`label` runs one in
  :class:`taigym.sim.carried.CarriedContainer2D` and returns the spilled fraction.
* ``"3d"`` (``taigym/Transport3D-v0``): positions (x, y, z; z up) of a container held upright;
  :func:`label_3d` runs one in :class:`taigym.sim.carried.CarriedContainer3D`.

:func:`features` turns a trajectory sampled every 0.05 s into a (L, 10) sequence: pose relative
to the start, velocity and acceleration (scaled), and the tilt from the effective vertical,
padded to ``MAX_LEN``.
* :class:`SFCNet` - the network; :class:`SpillFreeClassifier` - the callable
  ``classifier(traj, props) -> bool`` that SFTP uses (True: spill-free), with a decision
  threshold chosen for precision (it must not call a spilling trajectory safe).

The trajectory object only needs ``pos``, ``vel``, ``acc`` arrays (N, 3) sampled every ``DT``.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence

import numpy as np

from taigym.sim.constants import CONTROL_DT, GRAVITY

from .max_tilt import max_tilt, max_tilt_3d

DT = CONTROL_DT              # s, trajectory sampling (the envs' control step)
MAX_LEN = 200               # samples (10 s); longer trajectories are cut
N_RAW = 9
N_FEATURES = 10
KINDS = ("planar", "3d")
SCALES = {  # per column of (pose, velocity, acceleration)
    "planar": np.array([1.0, 1.0, 1.0, 0.8, 0.8, 2.0, 6.0, 6.0, 12.0]),  # m, rad, m/s, rad/s, m/s^2, rad/s^2
    "3d": np.array([1.0, 1.0, 1.0, 0.8, 0.8, 0.8, 6.0, 6.0, 6.0]),       # m, m/s, m/s^2
}
SPILL_LIMIT = 1e-3          # spill-free: at most 0.1 % spilled
SETTLE = 0.5                # s simulated at rest after the trajectory ends (late sloshing)
WALL_THICKNESS = 0.008      # m, Transport-v0's containers (taigym.envs.transport_tasks)
WALL_THICKNESS_3D = 0.02    # m, Transport3D-v0's (taigym.envs.transport3d.CONTAINER_WALL)
SLOSH_DAMPING = 0.1         # damping ratio of the slosh mode: FLIP's in a 2D cup (docs/validation.md, slosh)
SLOSH_SUBSTEPS = 10         # integration steps per sample


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return kind


def raw_features(traj, kind: str = "planar") -> tuple[np.ndarray, int]:
    """(MAX_LEN, N_RAW) float32: pose relative to the start, velocity, acceleration (scaled by
    SCALES[kind]), zero-padded; and the number of valid rows."""
    pos, vel, acc = (np.asarray(a, dtype=np.float64) for a in (traj.pos, traj.vel, traj.acc))
    x = np.concatenate([pos - pos[0], vel, acc], axis=1) / SCALES[_kind(kind)]
    n = min(len(x), MAX_LEN)
    out = np.zeros((MAX_LEN, N_RAW), np.float32)
    out[:n] = x[:n]
    return out, n


def with_effective_tilt(raw: np.ndarray, kind: str = "planar", props=None) -> np.ndarray:
    """Append, per sample, the container's tilt from the effective vertical (rad): what the free
    surface responds to (a function of the pose sequence). Planar: tilt + atan(a_x / (g + a_z)).
    3D, held upright: the tilt of the free surface's fundamental slosh mode
    (:func:`slosh_tilt`; ``props`` (r_b, r_u, h_c, h_w), m, per trajectory, needed)."""
    a = raw[..., 6:9] * SCALES[_kind(kind)][6:9]
    if kind == "planar":
        psi = raw[..., 2] * SCALES["planar"][2] + np.arctan2(a[..., 0], GRAVITY + a[..., 1])
    else:
        psi = slosh_tilt(a, props)
    return np.concatenate([raw, psi.astype(np.float32)[..., None]], axis=-1)


def slosh_tilt(acc: np.ndarray, props) -> np.ndarray:
    """(..., L) tilt (rad) of the free surface of an upright container carried with acceleration
    ``acc`` (..., L, 3) (z up, sampled every DT), by linear sloshing theory: the first
    antisymmetric mode of a cylinder of the surface's radius R at the liquid depth h, of angular
    frequency w^2 = g k tanh(k h) with k = 1.8412 / R, is an oscillator driven by the horizontal
    acceleration, x'' + 2 zeta w x' + w^2 x = a_h (zeta = SLOSH_DAMPING); its surface tilts by
    atan(w^2 |x| / (g + a_z)), which is atan(|a_h| / g) under a steady acceleration and
    overshoots it after a change (the SFRRT* paper's sloshing, which the quasi-static tilt misses)."""
    acc = np.asarray(acc, dtype=np.float64)
    p = np.asarray(props, dtype=np.float64).reshape(-1, 4)
    rb, ru, hc, hw = p.T
    radius = rb + (ru - rb) * hw / hc
    k = 1.8412 / radius
    w = np.sqrt(GRAVITY * k * np.tanh(k * hw)).reshape(acc.shape[:-2] + (1,))   # rad/s
    x, v = np.zeros(acc.shape[:-2] + (2,)), np.zeros(acc.shape[:-2] + (2,))
    out = np.zeros(acc.shape[:-1])
    h = DT / SLOSH_SUBSTEPS
    for i in range(acc.shape[-2]):
        a0, a1 = acc[..., max(i - 1, 0), :2], acc[..., i, :2]
        for j in range(SLOSH_SUBSTEPS):          # semi-implicit Euler, w h ~ 0.1
            a = a0 + (a1 - a0) * (j + 1) / SLOSH_SUBSTEPS
            v = v + h * (a - 2 * SLOSH_DAMPING * w * v - w * w * x)
            x = x + h * v
        out[..., i] = np.arctan2(w[..., 0] ** 2 * np.linalg.norm(x, axis=-1), GRAVITY + acc[..., i, 2])
    return out


def features(traj, kind: str = "planar", props=None) -> tuple[np.ndarray, int]:
    """(MAX_LEN, N_FEATURES) float32 network input and the number of valid rows (``props``:
    the container's, needed in 3D)."""
    raw, n = raw_features(traj, kind)
    out = with_effective_tilt(raw, kind, props)
    out[n:] = 0.0
    return out, n


def prop_features(props: Sequence[float], kind: str = "planar") -> np.ndarray:
    """Container properties (r_b, r_u, h_c, h_w, m) -> (6,): scaled by 0.1 m, plus the max tilt
    (rad; the SFRRT* paper's 2D formula, or the 3D frustum's) and the fill ratio."""
    rb, ru, hc, hw = (float(p) for p in props)
    tilt = (max_tilt if _kind(kind) == "planar" else max_tilt_3d)(rb, ru, hc, hw)
    return np.array([rb / 0.1, ru / 0.1, hc / 0.1, hw / 0.1, tilt, hw / hc], np.float32)


def label(traj, props: Sequence[float], carried=None, seed: int = 0) -> float:
    """Spilled fraction when the trajectory (sampled every DT) is executed in the particle
    simulator, plus SETTLE s at rest. ``carried``: a CarriedContainer2D to reuse."""
    from ..sim import container
    from ..sim.carried import CarriedContainer2D

    rb, ru, hc, hw = (float(p) for p in props)
    if carried is None:
        carried = CarriedContainer2D(0.12, 0.14, dx=0.0035)
    cup = container("frustum", width=2 * ru, height=hc, wall_thickness=WALL_THICKNESS,
                    bottom_width=2 * rb)
    carried.load(cup, hw / hc, seed=seed)
    pos, vel = np.asarray(traj.pos), np.asarray(traj.vel)
    for k in range(len(pos) - 1):
        carried.step(pos[k], vel[k], vel[k + 1], DT)
        if carried.unstable:
            return 1.0
    for _ in range(int(round(SETTLE / DT))):
        carried.step(pos[-1], np.zeros(3), np.zeros(3), DT)
    return carried.spilled


def label_3d(traj, props: Sequence[float], carried=None, seed: int = 0, dx: float = 0.0065) -> float:
    """As :func:`label` for a 3D trajectory of positions (z up) of a container held upright,
    in :class:`taigym.sim.carried.CarriedContainer3D` (``carried`` to reuse one, else one at
    grid spacing ``dx``, m: Transport3D-v0's default)."""
    from ..sim import container3d
    from ..sim.carried import CarriedContainer3D

    rb, ru, hc, hw = (float(p) for p in props)
    if carried is None:
        carried = CarriedContainer3D(0.04, 0.09, dx=dx)
    cup = container3d("frustum", width=2 * ru, height=hc, wall_thickness=WALL_THICKNESS_3D,
                      bottom_width=2 * rb)
    carried.load(cup, hw / hc, seed=seed)
    # robot axes (z up) -> simulator axes (y up): (x, y, z) -> (x, z, -y); no rotation
    vel = np.asarray(traj.vel, dtype=np.float64)[:, [0, 2, 1]] * [1.0, 1.0, -1.0]
    vel = np.concatenate([vel, np.zeros_like(vel)], axis=1)
    for k in range(len(vel) - 1):
        carried.step(np.zeros(3), vel[k], vel[k + 1], DT)
        if carried.unstable:
            return 1.0
    for _ in range(int(round(SETTLE / DT))):
        carried.step(np.zeros(3), np.zeros(6), np.zeros(6), DT)
    return carried.spilled


def _torch():
    import torch

    return torch


def build_net(d_model: int = 32, layers: int = 1, heads: int = 4, dropout: float = 0.1):
    torch = _torch()
    nn = torch.nn

    class SFCNet(nn.Module):
        """Trajectory -> transformer encoder -> masked mean/max pooling; concatenated with the
        container properties -> MLP -> logit of "spill-free"."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(N_FEATURES, d_model)
            pe = torch.zeros(MAX_LEN, d_model)
            t = torch.arange(MAX_LEN, dtype=torch.float32)[:, None]
            div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(1e4) / d_model))
            pe[:, 0::2], pe[:, 1::2] = torch.sin(t * div), torch.cos(t * div)
            self.register_buffer("pe", pe)
            layer = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout=dropout,
                                               batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Sequential(nn.Linear(2 * d_model + 6, 64), nn.ReLU(), nn.Dropout(dropout),
                                      nn.Linear(64, 1))

        def forward(self, seq, length, props):
            seq = seq[:, :int(length.max())]  # padding past the longest is never attended
            L = seq.shape[1]
            pad = torch.arange(L, device=seq.device)[None, :] >= length[:, None]
            h = self.encoder(self.embed(seq) + self.pe[:L], src_key_padding_mask=pad)
            keep = (~pad).unsqueeze(-1).float()
            mean = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
            mx = h.masked_fill(pad.unsqueeze(-1), -1e4).max(1).values
            return self.head(torch.cat([mean, mx, props], dim=1)).squeeze(-1)

    return SFCNet()


class SpillFreeClassifier:
    """The learned SFC as SFTP's callable: ``clf(traj, props) -> bool`` (True: spill-free, i.e.
    predicted probability of spill-free >= ``threshold``)."""

    def __init__(self, net, threshold: float = 0.5, config: dict | None = None):
        self.net, self.threshold, self.config = net, float(threshold), dict(config or {})
        self.kind = _kind(self.config.get("kind", "planar"))
        self.net.eval()

    def probability(self, trajs: Sequence, props: Sequence[Sequence[float]]) -> np.ndarray:
        torch = _torch()
        f = [features(t, self.kind, p) for t, p in zip(trajs, props)]
        seq = torch.from_numpy(np.stack([a for a, _ in f]))
        length = torch.tensor([n for _, n in f])
        pr = torch.from_numpy(np.stack([prop_features(p, self.kind) for p in props]))
        with torch.no_grad():
            return torch.sigmoid(self.net(seq, length, pr)).numpy()

    def __call__(self, traj, props) -> bool:
        return bool(self.probability([traj], [props])[0] >= self.threshold)

    def save(self, path: str) -> None:
        """Atomic write (tmp file + os.replace) of the weights, threshold and config."""
        torch = _torch()
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        os.close(fd)
        torch.save({"state_dict": self.net.state_dict(), "threshold": self.threshold,
                    "config": self.config}, tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> SpillFreeClassifier:
        torch = _torch()
        ck = torch.load(path, map_location="cpu", weights_only=True)
        net = build_net(**ck["config"].get("net", {}))
        net.load_state_dict(ck["state_dict"])
        return cls(net, ck["threshold"], ck["config"])


DEFAULT_PATH = os.path.join(os.path.dirname(__file__), "data", "sfc.pt")
DEFAULT_PATH_3D = os.path.join(os.path.dirname(__file__), "data", "sfc3d.pt")
