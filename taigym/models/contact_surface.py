"""Environment contact surfaces of Bouyarmane 2011, "Multi-Contact Planning": where a robot link
surface (a sole, a hand) may be placed. Plain geometry shared by the MultiContact task
samplers (which list a scene's surfaces) and the stance planner (which places contacts on them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Surface:
    """An environment contact surface. ``kind`` "plane": points ``origin + u t`` (+ the limb's
    lateral offset along y), outward normal ``normal``; "bar": a cylinder of axis ``t`` through
    ``origin`` and radius ``radius`` (hands grasp it, a bilateral contact; feet stand on its
    top, normal ``normal``). ``u_range`` bounds u (m); ``limbs`` may touch it; ``mu`` is the
    friction coefficient; ``lateral``: the limb's y offset applies (planes across the scene).
    ``solid``: for a deformable support, the linear-elastic block whose top face the plane is
    (:class:`taigym.sim.soft_support.SoftBlock`); None for a rigid surface."""

    name: str
    kind: str
    origin: tuple[float, float, float]
    t: tuple[float, float, float]
    normal: tuple[float, float, float]
    u_range: tuple[float, float]
    mu: float
    limbs: tuple[str, ...]
    lateral: bool = True
    radius: float = 0.0
    solid: object | None = None

    def point(self, u: float) -> np.ndarray:
        return np.asarray(self.origin) + u * np.asarray(self.t)
