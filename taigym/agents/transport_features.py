"""Input features of the MLP policies (``bc``, ``dagger``) on Transport-v0's observation: the
carry seen in its own direction of travel.

Transport-v0 is symmetric about the room's vertical mid-line: a task mirrored (x -> W - x, tilts
and tilt rates negated) is as hard, and the expert's actions mirror with it. ``"obstacles"``
(kind of :mod:`taigym.agents.features`) expresses the observation in the frame of the carry:
``s`` = +1 when the goal is right of the start, -1 when left (from the episode's first
observation), and every x coordinate, tilt and tilt rate multiplied by ``s`` (x measured from
the wall behind the start). The policy's network acts in that frame too: its vx and tilt-rate
outputs are multiplied by ``s`` (:func:`action_sign`), so that carries to the left and to the
right are one problem, learned from all the demonstrations.

The boxes, which the observation lists by distance to the container (an order that changes as
it moves), come sorted by how far along the direction of travel they are from the start, boxes
at the same x (a wall's two sides of its window, a shelf's two boards) lowest first (an order
fixed for the episode), each as the distances a planner reasons with, from the
container's outline (its top radius across, its height up): how far ahead its near face and its
far face are (m, along ``s``), how far its top is above the container's bottom and how far its
underside is above the container's rim (m), and the gap between the two outlines (m, the largest
of those four separations, negative when they overlap). BC's failures on Transport-v0 were
collisions (boards under a shelf's goal, the edges of a wall's window), not spills.

The expert tracks a jerk-limited (Ruckig) trajectory: its acceleration is a state of the plan
that one observation does not show (the velocity does; 0.9 correlation between one step's
velocity change and the next's in 298 sfrrt demonstrations). The features add the change of
velocity since the previous observation (:func:`featurize`'s ``prev``; zero at the first), and
the network predicts the velocity change it commands, not the velocity: the action is the
observed velocity (over :data:`MAX_VELOCITY`) plus the network's output in the frame of travel
(:func:`output`), scaled by the demonstrations' spread of velocity changes (``action_scale``).
Regressing the action itself, an MLP learned "keep the current velocity" (the velocity change is
2 % of the action's variance along x) and little of when to speed up or brake.
"""

from __future__ import annotations

import numpy as np

from .sfrrt import MAX_VELOCITY, ROOM

# Transport-v0's observation entries (taigym.envs.transport): 0-2 pose (x, z, tilt), 3-5 velocity,
# 6-8 goal, 9-11 goal minus pose, 13 top radius, 14 height, 19 + 5 k the obstacle slots (present,
# x_c, z_c, width, height)
POSE, VEL, GOAL, TO_GOAL, TOP_RADIUS, HEIGHT, SLOTS, SLOT_SIZE = 0, 3, 6, 9, 13, 14, 19, 5
ROOM_WIDTH = ROOM[0]                   # m, Transport-v0's room
PER_BOX = 6                            # present, near face, far face, top, underside, separation
PER_ROW = 14         # pose, velocity, goal minus pose, velocity change (3 each), pose minus start (2)
START_DIM = 4                          # the start pose in the frame of travel, then s
#: the room-frame entries the travel frame replaces (x, tilt, their rates and the boxes): hidden
ROOM_FRAME = [POSE, POSE + 2, VEL, VEL + 2, GOAL, GOAL + 2, TO_GOAL, TO_GOAL + 2]
MIRRORED = np.array([-1.0, 1.0, -1.0])  # an action's (vx, vz, tilt rate) mirrored


def n_slots(obs_dim: int) -> int:
    return (obs_dim - SLOTS) // SLOT_SIZE


def hidden_entries(obs_dim: int) -> list[int]:
    """Observation entries the travel frame replaces (the policy does not see them)."""
    return ROOM_FRAME + list(range(SLOTS, SLOTS + SLOT_SIZE * n_slots(obs_dim)))


def extra_dim(obs_dim: int) -> int:
    """Entries ``"obstacles"`` appends to an observation of ``obs_dim`` entries."""
    return PER_BOX * n_slots(obs_dim) + PER_ROW + START_DIM


def _travel(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Room x (n,) in the frame of travel: from the wall behind the start."""
    return np.where(s > 0, x, ROOM_WIDTH - x)


def start_features(start: np.ndarray) -> np.ndarray:
    """(n, START_DIM) from the episodes' first observations (n, d): the start pose in the frame
    of travel and ``s`` (last)."""
    s0 = np.atleast_2d(np.asarray(start, np.float64))
    s = np.where(s0[:, GOAL] >= s0[:, POSE], 1.0, -1.0)
    return np.column_stack([_travel(s0[:, POSE], s), s0[:, POSE + 1], s * s0[:, POSE + 2], s]).astype(np.float32)


def featurize(x: np.ndarray, start_part: np.ndarray, prev: np.ndarray | None = None) -> np.ndarray:
    """(n, extra_dim - START_DIM) for observations ``x`` (n, d), their episodes'
    :func:`start_features` (n, START_DIM) or (START_DIM,) and the observations before them
    ``prev`` (rows as ``x``; None or the row itself at an episode's start: no velocity change)."""
    x = np.atleast_2d(np.asarray(x, np.float64))
    p = x if prev is None else np.broadcast_to(np.asarray(prev, np.float64), x.shape)
    sp = np.broadcast_to(np.asarray(start_part, np.float64), (len(x), START_DIM))
    x0, z0, s = sp[:, 0:1], sp[:, 1:2], sp[:, 3:4]
    k = n_slots(x.shape[1])
    slots = x[:, SLOTS:SLOTS + SLOT_SIZE * k].reshape(len(x), k, SLOT_SIZE)
    present = slots[..., 0] > 0.5
    px = _travel(x[:, POSE:POSE + 1], s)
    pz = x[:, POSE + 1:POSE + 2]
    centre = _travel(slots[..., 1], s)
    # boxes in the order the carry meets them (from the start, along s), boxes at the same x (a
    # wall's two sides of its window, a shelf's two boards) lowest first; absent slots last. A tie
    # left to the observation's order (nearest the container first) swapped the two boxes' inputs
    # as the carry crossed the height between their centres, inside the window
    order = np.lexsort((slots[..., 2], np.where(present, centre - x0, np.inf)), axis=-1)
    slots, centre = (np.take_along_axis(a, order[..., None], axis=1) for a in (slots, centre[..., None]))
    present = np.take_along_axis(present, order, axis=1)
    r, h = x[:, TOP_RADIUS:TOP_RADIUS + 1], x[:, HEIGHT:HEIGHT + 1]
    ahead = centre[..., 0] - px
    half_w, half_h = 0.5 * slots[..., 3], 0.5 * slots[..., 4]
    near, far = ahead - half_w - r, ahead + half_w + r
    top, under = slots[..., 2] + half_h - pz, slots[..., 2] - half_h - (pz + h)
    # the gap between the container's outline and the box (m; < 0: they overlap, a collision):
    # the largest of the four separations, a max an MLP of these inputs draws only roughly
    sep = np.max(np.stack([near, -far, -top, under]), axis=0)
    box = np.stack([np.ones_like(ahead), near, far, top, under, sep], axis=-1)
    box *= present[..., None]
    rows = [px, pz, s * x[:, POSE + 2:POSE + 3]]
    dv = x[:, VEL:VEL + 3] - p[:, VEL:VEL + 3]
    for v in (x[:, VEL:VEL + 3], x[:, TO_GOAL:TO_GOAL + 3], dv):
        rows += [s * v[:, 0:1], v[:, 1:2], s * v[:, 2:3]]
    rows += [px - x0, pz - z0]
    return np.hstack([box.reshape(len(x), -1), *rows]).astype(np.float32)


def action_sign(inputs: np.ndarray, in_dim: int) -> np.ndarray:
    """(n, 3): the factors that turn the network's actions in the frame of travel into the
    room's, from featurized ``inputs`` (n, in_dim) (``s`` is their last entry)."""
    s = np.asarray(inputs)[..., in_dim - 1:in_dim]
    return np.where(s > 0, 1.0, MIRRORED)


def held_action(inputs: np.ndarray) -> np.ndarray:
    """(n, 3): the action that keeps the observed velocity, from featurized ``inputs``."""
    return np.asarray(inputs)[..., VEL:VEL + 3] / MAX_VELOCITY


def output(inputs: np.ndarray, in_dim: int, net_out, scale):
    """The action (n, 3, room frame) for the network's output ``net_out`` (n, 3; a velocity
    change in the frame of travel over ``scale``; numpy or torch, returned as it)."""
    sign = action_sign(inputs, in_dim) * np.asarray(scale)
    held = held_action(inputs)
    if isinstance(net_out, np.ndarray):
        return held.reshape(net_out.shape) + net_out * sign.reshape(net_out.shape)
    import torch

    return torch.as_tensor(held, dtype=net_out.dtype) + net_out * torch.as_tensor(sign, dtype=net_out.dtype)


def targets(inputs: np.ndarray, in_dim: int, actions: np.ndarray) -> np.ndarray:
    """The network's targets (before ``scale``) for the room-frame ``actions``: their velocity
    change in the frame of travel."""
    return (np.asarray(actions, np.float64) - held_action(inputs)) * action_sign(inputs, in_dim)


__all__ = ["START_DIM", "action_sign", "extra_dim", "featurize", "hidden_entries", "output", "start_features",
           "targets"]
