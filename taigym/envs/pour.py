"""``taigym/Pour-v0``: pour liquid from a source container S into a moving target T (2D).

This is Pan & Manocha 2017's pouring problem (§IV-VI) at kitchen scale, simulated by
the FLIP solver of ``taigym.sim``. The task (``env.unwrapped.task``, a frozen
:class:`~taigym.envs.pour_tasks.PourTask`) fixes both containers, T's constant velocity, the fill
level, the viscosity, whether the liquid starts at rest (TRANSFER+ZERO) or moving with S
(TRANSFER+FOLLOW) and up to two static obstacles; see :mod:`taigym.envs.pour_tasks` for the
distribution and its mapping from the paper's.

The scene is 0.8 m x 0.5 m with solid edges (the bottom edge is the floor). S is moved
kinematically by the agent; T moves at its constant velocity and bounces off the sides of a box
that keeps it on the table (``task.target_pose_at(t)`` gives its whole trajectory). Poses are
those of the containers' frames: origin at the centre of the inner bottom, y along the axis,
theta counter-clockwise (pouring to the right means theta < 0). Obstacles (``task.obstacles``,
e.g. Pan & Manocha 2016's tall block between S and T; sampled tasks have none) are static solid boxes
(x_centre, y_centre, width, height); liquid cannot pass through them, and liquid resting on one
is spilled.

## Action space

``Box(-1, 1, (3,), float32)``, scaled to S's displacement over one 0.05 s control step:

| index | action | scale per step | max rate |
|-------|--------|----------------|----------|
| 0 | dx of S's frame origin | 0.025 m | 0.5 m/s |
| 1 | dy of S's frame origin | 0.025 m | 0.5 m/s |
| 2 | dtheta of S (counter-clockwise) | 0.1 rad | 2 rad/s |

theta is kept in [-2.5, 2.5] rad. A component of the move that would make S's solid penetrate
T's or an obstacle (deeper than it already does; for obstacles, also on the way, so that S
cannot jump through a thin box), go below the floor or leave the scene is not applied (the
others are, if they are valid on their own); ``info["action_clipped"]`` says when that happened.
Components outside [-1, 1] are clipped; a nan or an infinity, or an action of another shape,
raises ``ValueError``.

``pivot="lip"`` (default ``"frame"``): dtheta rotates S about its pouring lip (the right lip if
the new theta is <= 0, else the left) and (dx, dy) move that lip, so that a tilt alone pours
from where the lip is; the move is then applied to S's frame as above (a refused component is one
of the frame's). A pour needs no coordination of translation and rotation: with the frame pivot
a tilt swings the lip back over S's body, away from T.

## Observation space

``obs_mode="features"`` (default; Pan & Manocha 2017, Fig. 4a): a float32 vector, every entry bounded:

| index | observation | unit | range |
|-------|-------------|------|-------|
| 0-2 | S pose x, y, theta | m, m, rad | [0, 0.8], [0, 0.5], [-2.5, 2.5] |
| 3-5 | S velocity vx, vy, omega (last step) | m/s, rad/s | [-1, 1], [-1, 1], [-2, 2] |
| 6-7 | T position x, y | m | [0, 0.8], [0, 0.5] |
| 8-9 | T velocity vx, vy | m/s | [-1, 1] |
| 10-11 | T's opening centre minus S's opening centre | m | [-0.8, 0.8], [-0.5, 0.5] |
| 12 | initial fill level | - | [0, 1] |
| 13 | log10 viscosity (Pa s) | - | [-4, 0] |
| 14 | time / horizon | - | [0, 1] |
| 15-18 | S shape one-hot (rect, frustum, oval, cup) | - | {0, 1} |
| 19-20 | S interior width (opening), height | m | [0, 0.4] |
| 21-22 | S shape parameters (frustum: bottom/width; cup: corner radius/width; oval: body/width, neck height/height) | - | [0, 5] |
| 23 | S's geometric max tilt angle at the task's fill | rad | [0, pi] |
| 24-31 | the same for T (one-hot, width, height, 2 parameters) | | |
| 32-35 | obstacle 0: x_centre, y_centre, width, height (zeros if the task has no obstacle 0) | m | [0, 0.8], [0, 0.5], [0, 0.5], [0, 0.5] |
| 36-39 | obstacle 1, the same | m | |
| 40-... | liquid free-surface heightfield in S's frame, ``heightfield_bins`` columns across S's interior, newest of the last 4 frames first; height of the highest particle over S's inner bottom / S's height (0 = no liquid) | - | [0, 1.5] |

``obs_mode="lip"`` (Fig. 4b): entries 0-39, then the liquid height at S's left and right lips
(the highest particle within a band beside each lip, in S's frame, / S's height) for the last 4
frames (8 numbers in [0, 1.5]). ``obs_mode="particles"``: ``Dict(state=Box(40,), particles=Box
(n_particles, 4))`` with a fixed subsample of the particles (x, y, vx, vy; m, m/s). ``obs_mode=
"rgb"``: a ``Box(0, 255, (H, W, 3), uint8)`` image of size ``image_size``.

## Rewards

``reward_mode`` chooses the reward; ``info["reward_<term>"]`` holds each term of the mode, and
they sum to the reward. Liquid terms are fractions of the initial liquid (for particles: per
particle, divided by the number of particles N, so that the return does not depend on the
resolution).

| mode | term | value |
|------|------|-------|
| ``"rp"`` (default), ``"dense"`` | target | Pan & Manocha 2017's R_p = (W - dist)/W, clipped to [0, 1], for each particle entering T this step (dist: distance from T's opening centre where it crosses the opening, W: half the opening width), minus the R_p earned earlier by each particle that leaves T; summed and divided by N |
| ``"rp"``, ``"dense"`` | spill | ``-spill_penalty`` (default 2) times the increase of the spilled fraction |
| ``"rp"``, ``"dense"`` | smooth | ``-smoothness_penalty`` (default 1e-3) times ``||a_t - a_{t-1}||^2`` |
| ``"dense"`` | approach | ``shaping_gamma`` Phi_a(s') - Phi_a(s), Phi_a = 0.2 max(0, 1 - miss / 0.4 m): miss is the horizontal distance from the nearer of S's lips to where T's opening centre will be when liquid dropped from that lip reaches T's rim |
| ``"dense"`` | lean | ``shaping_gamma`` Phi_l(s') - Phi_l(s), Phi_l = 0.5 aim min(1, abs(theta) / 2 rad): aim = max(0, 1 - miss / W) on the pouring lip (the right one for theta <= 0), fading to 0 as that lip sinks 1 cm below T's rim |
| ``"sparse"`` | success | 1 on the step that ends an episode with ``success``, else 0 |

``"rp"``'s undiscounted return is (sum of R_p over the particles in T)/N - spill_penalty *
spilled - smoothness, in about [-2, 1]. ``"dense"`` adds potential-based shaping (Ng, Harada &
Russell 1999) that leads exploration to a pour over T: a lip over T's opening, then a tilt only
while what it pours would land in T. Phi is 0 on the step that ends an episode (the time is in
the observation), so the shaping adds -Phi(s_0) to the discounted return whatever the agent
does: for a learner whose discount is ``shaping_gamma`` (default 0.99) the optimal policies of
``"dense"`` and ``"rp"`` are the same (``taigym.envs.pour_reward``). ``"rp"`` stays the default
because the experts' objectives and every published return use it, and because ``"dense"``
assumes the learner's discount.

## Episode end

* Termination: S is empty (``in_source <= 0.02``) and the liquid has settled (``in_flight <=
  0.005``).
* Truncation: at ``horizon`` (5 s = 100 steps), or when the solver blows up
  (``info["sim_unstable"]``).

## Info (every step, including reset)

``in_source``, ``in_target``, ``spilled``, ``in_flight`` (fractions of the initial liquid; liquid
outside both containers is spilled if it moved slower than 5 cm/s over the last step, e.g.
resting on the floor or an obstacle, or is below the level of T's opening, else in flight),
``success`` (= ``is_success``: in_target >= 0.9 and spilled <= 0.05), ``sim_unstable``,
``time`` (s), ``source_pose``, ``source_velocity``, ``target_pose``, ``target_velocity``,
``action_clipped``, ``collision`` (S's solid overlaps T's or an obstacle), ``reward_<term>`` for
each term of the reward mode (Rewards), ``n_particles``.

## Arguments

``gym.make("taigym/Pour-v0", container=None, target_container=None, fill=None, viscosity=None,
target_velocity=None, liquid_velocity=None, task_split=None, obs_mode="features",
resolution=128, render_mode=None, ...)``: task arguments left at ``None`` are sampled, others
fix that variable of every sampled task; ``task_split="train"|"eval"`` samples tasks from the
fixed split instead; ``reset(options={"task": task})`` runs a given task (or its ``to_dict``)
exactly. ``over_target`` (0, in [0, 1]) is the fraction of the tasks the env draws itself (a
reset without ``options["task"]``) that start with S's pouring lip over T's opening
(``pour_tasks.over_target``): a start-state curriculum for RL, which learns what tilting over
T earns before it has to learn the approach. Tasks given to ``reset`` (an evaluation's) are run
as given. ``resolution`` is the number of grid cells across the 0.8 m scene (64-512; walls are
``max(1 cm, 2 cells)`` thick). Other arguments: ``horizon`` (s, default 5), ``max_particles``
(capacity per scene; default: a full 10 x 12 cm cup), ``n_particles`` (particles obs, 256),
``heightfield_bins`` (16), ``image_size`` ((80, 128), rgb obs), ``render_size`` ((320, 512)),
``spill_penalty`` (2), ``smoothness_penalty`` (1e-3), ``reward_mode`` ("rp", "dense" or
"sparse"), ``shaping_gamma`` (0.99, in [0, 1]), ``pivot`` ("frame" or "lip"), ``arch`` ("cpu"),
``fidelity`` ("particles"). Closed envs hand their solver to the next env built with the same resolution
and batch size, which saves Taichi's kernel compilation. The batched version is
``gym.make_vec("taigym/Pour-v0", num_envs=B, vectorization_mode="vector_entry_point")``.

## Fidelity

``fidelity="particles"`` (default) simulates the liquid with the FLIP solver.
``fidelity="simplified"`` replaces it with Pan & Manocha 2016's reduced model (``taigym.envs.
pour_simplified``): the liquid in S is its volume and mean outflow speed, identified from FLIP
pours (``scripts/sysid_pour.py``); what leaves S follows the outflow parabola and counts as in T
if it comes down through T's opening, else as spilled once it lands. Same spaces, moves,
clipping, rewards and info keys (``n_particles`` is 0); no ``particles`` observation; the
heightfield and lip heights come from the flat free surface that holds the volume. Thousands of
steps per second, for RL and for planning.

## Vector env

``gym.make_vec("taigym/Pour-v0", num_envs=B, vectorization_mode="vector_entry_point", **kw)``
steps B scenes at once (``taigym.envs.pour_vector``): the particle fidelity in one launch of the
batched FLIP solver, the simplified one in array operations over the batch (``taigym.envs.
pour_array``), tens of thousands of steps per second. Member i seeded with ``seed + i`` gives
the transitions of a single env seeded with ``seed + i``; a finished member is reset on the next
step. Stable-Baselines3 trains on it through ``taigym.training.vec_env.BatchedVecEnv``. Resets
to a fixed split's tasks (``task_split``) reuse the tasks' geometry; a task freshly drawn from
the distribution costs milliseconds to set up (its S's outflow lookup tables).

## Version history

* v0 (2026-11-22): initial version.
* v0 (2026-11-27): ``metadata["episode_metrics"]`` declares what evaluations report; reward
  modes (``reward_mode``, ``shaping_gamma``) and the lip pivot (``pivot``), the defaults
  (``"rp"``, ``"frame"``) keeping the first release's reward and action (no change to the
  dynamics).
* v0 (2026-11-28): ``over_target`` (default 0: the tasks drawn as before).
* v0 (2026-11-28): the liquid solver changed (ghost-fluid free surface, implicit no-slip
  viscosity, rest-density correction; see the validation page): the same task and actions
  give a different liquid, so results from before are not comparable.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from taigym.sim.constants import CONTROL_DT

from .checks import check_action, reset_options
from .pour_array import SimplifiedArrayBatch
# public names of the split modules, importable from here as before
from .pour_batch import (N_BODIES, OBSTACLE_HANDLES, PARKED_BOX_SIZE, PARKED_POSE, SOURCE,  # noqa: F401
                         TARGET, PourBatch)
from .pour_config import (ACTION_SCALE, EMPTY_FRACTION, EPISODE_METRICS, FIDELITIES, HISTORY,  # noqa: F401
                          N_STATE, OBS_MODES, SETTLE_SPEED, SETTLED_FRACTION, SUCCESS_IN_TARGET,
                          SUCCESS_MAX_SPILLED, TILT_LIMIT, PourConfig, action_space, as_task,
                          make_config, observation_space, state_bounds)
from .pour_geometry import shape_features, task_geometry, to_local, to_world  # noqa: F401
from .pour_simplified import SimplifiedPourBatch
from .pour_tasks import DOMAIN, MAX_OBSTACLES, PourTask  # noqa: F401


def make_batch(cfg: PourConfig, batch_size: int = 1, vectorised: bool = False) -> PourBatch:
    """The batch of the config's fidelity: the FLIP solver or Pan & Manocha 2016's reduced model,
    the latter in array operations over the batch if ``vectorised`` (the vector env's engine;
    the single env's steps each member in Python floats, faster for one)."""
    if cfg.fidelity == "simplified":
        return (SimplifiedArrayBatch if vectorised else SimplifiedPourBatch)(cfg, batch_size)
    return PourBatch(cfg, batch_size)


# ---------------------------------------------------------------------- the env
class PourEnv(gym.Env):
    __doc__ = __doc__
    metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1 / CONTROL_DT)),
                "episode_metrics": EPISODE_METRICS}

    def __init__(self, **kwargs):
        self.cfg = make_config(**kwargs)
        self.render_mode = self.cfg.render_mode
        self.action_space = action_space()
        self.observation_space = observation_space(self.cfg)
        self._batch = make_batch(self.cfg, 1)
        self._needs_reset = True

    # public read-outs for experts, scripts and tests
    @property
    def task(self) -> PourTask | None:
        return self._batch.members[0].task

    @property
    def world(self):
        """The ``taigym.sim.World2D`` (member 0); None before the first reset."""
        return self._batch.world

    @property
    def source_shape(self):
        return self._batch.members[0].source

    @property
    def target_shape(self):
        return self._batch.members[0].target

    @property
    def dt(self) -> float:
        return CONTROL_DT

    @property
    def action_scale(self) -> np.ndarray:
        return ACTION_SCALE.copy()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = reset_options(options)
        given = options.get("task") is not None
        task = as_task(options["task"]) if given else self.cfg.sample(self.np_random)
        jitter = int(self.np_random.integers(2 ** 31))
        self._batch.reset_member(0, task, jitter, fresh=not given and self.cfg.task_split is None)
        self._needs_reset = False
        return self._batch.observation(0), dict(self._batch.members[0].info)

    def step(self, action):
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        self._batch.step(check_action(action, self.action_space).reshape(1, 3), None)
        reward, terminated, truncated = self._batch.outcome(0)
        return (self._batch.observation(0), reward, terminated, truncated,
                dict(self._batch.members[0].info))

    def render(self):
        if self.render_mode != "rgb_array" or self.task is None:
            return None
        return self._batch.render(0, self.cfg.render_size)

    def outflow(self):
        """Estimated outflow start point and velocity (world, m and m/s), or None."""
        return None if self.task is None else self._batch.outflow(0)

    def close(self):
        self._batch.release()
        self._needs_reset = True

