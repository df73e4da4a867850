"""Reward modes of ``taigym/Pour-v0`` (``reward_mode``), shared by both fidelities, the single env
and the vector env. The functions take floats or NumPy arrays (a batch) alike.

* ``"rp"`` (default): Pan & Manocha 2017's R_p for the liquid entering T, minus the spill
  penalty, minus the smoothness penalty (terms ``target``, ``spill``, ``smooth``).
* ``"dense"``: ``"rp"`` plus potential-based shaping (Ng, Harada & Russell 1999), terms
  ``approach`` and ``lean``: each is F = gamma Phi(s') - Phi(s) with gamma = ``shaping_gamma``
  and Phi = 0 at the state that ends an episode (termination or truncation: the time is in the
  observation, so the horizon is part of the state). The shaped return is then the ``"rp"``
  return minus Phi(s_0), which no action changes: a learner discounting with the same gamma has
  the same optimal policies under both modes.
* ``"sparse"``: 1 on the step that ends a successful episode, else 0 (term ``success``).

The potentials (m: S's and T's poses after the step; T never rotates):

| potential | value | why |
|-----------|-------|-----|
| ``approach`` | APPROACH_WEIGHT * max(0, 1 - miss / APPROACH_RANGE), miss the horizontal distance from the nearer of S's lips to where T's opening centre will be when liquid dropped from that lip reaches T's rim | brings a lip over T before any tilt |
| ``lean`` | LEAN_WEIGHT * aim * min(1, abs(theta) / FULL_LEAN), aim = max(0, 1 - miss / W) on S's pouring lip (the right one for theta <= 0, else the left; W: half T's opening) times a ramp from 0 (lip RIM_RAMP below T's rim) to 1 (lip at the rim or above) | rewards tilting only while the liquid it would pour lands in T |

Liquid leaving a lip falls nearly vertically (the jet's horizontal speed relaxes within 25-50
ms, ``taigym.models.simplified``), so the landing point is taken as the lip's x, and T moves on
for the fall time sqrt(2 drop / g). ``lean`` is 0 at theta = 0 from either side, so choosing the
lip by the tilt's sign keeps it continuous.
"""

from __future__ import annotations

import numpy as np

from taigym.sim.constants import GRAVITY

REWARD_MODES = ("rp", "dense", "sparse")
#: the terms of each mode, in the order they are summed; ``info["reward_<term>"]`` holds each
REWARD_TERMS = {"rp": ("target", "spill", "smooth"),
                "dense": ("target", "spill", "smooth", "approach", "lean"),
                "sparse": ("success",)}
POTENTIALS = ("approach", "lean")
APPROACH_WEIGHT = 0.2     # a full approach is worth a fifth of a perfect pour's R_p
APPROACH_RANGE = 0.4      # m: the approach potential grows from this far (half the scene)
LEAN_WEIGHT = 0.5         # leaning fully while aimed: half a perfect pour's R_p
FULL_LEAN = 2.0           # rad: nearly every S of the task distribution is empty by this tilt
RIM_RAMP = 0.01           # m: the lean potential fades as the lip sinks this far below T's rim


def potentials(s_pose, t_pos, t_vx, lips, t_oc, t_half):
    """(approach, lean) potentials of states (module docstring): S's pose ``s_pose`` = (x, y,
    theta) (m, rad), T's frame origin ``t_pos`` = (x, y) and horizontal speed ``t_vx`` (m/s),
    S's ``lips`` = ((x_left, y_left), (x_right, y_right)) in S's frame, T's opening centre
    ``t_oc`` = (x, y) in T's frame and half opening width ``t_half`` (m). Each value is a float
    or an array of the batch's shape."""
    x, y, th = s_pose
    (lxl, lyl), (lxr, lyr) = lips
    c, s = np.cos(th), np.sin(th)
    ox, oy = t_pos[0] + t_oc[0], t_pos[1] + t_oc[1]          # T's opening centre, world

    def miss(lx, ly):
        """Horizontal miss (m) of liquid dropped from the lip at (lx, ly), S frame, and the
        lip's height over T's rim (m)."""
        wx, wy = x + c * lx - s * ly, y + s * lx + c * ly
        fall = np.sqrt(2.0 * np.maximum(wy - oy, 0.0) / GRAVITY)
        return np.abs(wx - (ox + t_vx * fall)), wy - oy

    m_left, h_left = miss(lxl, lyl)
    m_right, h_right = miss(lxr, lyr)
    approach = APPROACH_WEIGHT * np.maximum(0.0, 1.0 - np.minimum(m_left, m_right) / APPROACH_RANGE)
    right = th <= 0.0
    m_pour, h_pour = np.where(right, m_right, m_left), np.where(right, h_right, h_left)
    aim = np.maximum(0.0, 1.0 - m_pour / t_half) * np.clip(1.0 + h_pour / RIM_RAMP, 0.0, 1.0)
    lean = LEAN_WEIGHT * aim * np.minimum(1.0, np.abs(th) / FULL_LEAN)
    return approach, lean
