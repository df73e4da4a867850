"""``stance``: Bouyarmane & Kheddar's expert (Bouyarmane 2011, "Multi-Contact Planning") for
``taigym/MultiContact-v1``: motion synthesis over a stance plan.

On ``reset`` the agent plans a stance sequence for ``env.unwrapped.task`` with
:func:`taigym.planners.stance.plan`, then executes it with the paper's motion synthesis: a
finite state machine walks the sequence and, at every control step, feeds a QP controller with
its objectives:

* Adj- (a contact is released): ``shift`` the centre of mass to that of the next stance's
  configuration while every contact is held (moved, where that CoM lies within 5 cm of the edge
  of the next support's equilibrium region, to the nearest point with a stability margin:
  :func:`taigym.planners.stance.com_target` with ``margin``); once the CoM is there, unload the contact to break
  (a penalty on its forces that rises from 0 over 0.6 s, so its force goes smoothly to about
  zero), then ``release`` it (and open the hand's grip).
* Adj+ (a contact is added): on one sole with no grasp, first ``centre`` the CoM, the limb held,
  at the nearest point that support balances with a stability margin (as a shift's target; done
  within 1.5 cm, or 1 s after its reference ends); a foot's swing from one sole on a deformable
  support first centres the CoM on the swing's own CoM target (moved inside the support's
  region); then ``swing`` the limb along a lifted path
  (up the surface normal, across, down; a foot before a step's face first rises clear of it, a
  foot to or from a rung first backs off the ladder, from under a rung first drawing back level
  till its toe clears it) to its contact target while the others hold, pressing a centimetre
  past the surface until the limb touches it (and a sole lies flat on it), then close the grip
  on a bar; the swinging limb's joints follow its path, not the posture reference (but an arm's
  reaching for a wall and a leg's stepping across a drop); then
  ``load`` it: the new contact joins the support with a penalty on its forces that falls to 0
  over the phase, while the CoM moves to the next configuration's.
* Deformable supports (the paper's linear-elastic extension, the ``soft`` family): the plan's
  configurations stand sunk into the pad (the IK's equilibrium with the pad's reaction forces,
  :mod:`taigym.planners.stance_soft`), so the CoM and posture references carry the expected
  sinks; a sole swings to its target lowered by the sink the plan expects once it is loaded;
  while a shift unloads the contact to break, the soft contacts are drawn to the plan's forces
  (the sinks follow the forces); a sole's centre of pressure is kept to the middle half of the
  sole (a moment tilts it into the pad). At the end of each such shift the agent logs the
  planned and simulated sinks (``agent.sink_log``).
* Failures are never built on: a swing that has not landed by its timeout (the phase's path
  time + 5 s) is retried once from where the limb is, then abandoned, the robot staying in the
  swing's stance (``hold``) with the limb never loaded; a shift whose CoM never gets over the
  next support (within 1.5 cm of the planned CoM, or 4 cm where the next support alone balances
  it; after the shift's timeout, anywhere it does), or whose contact to break still carries more
  than UNLOAD_TOL 1.5 s after its unload ramp, holds the stance instead of releasing the
  contact. From such a stance the agent replans (at most MAX_REPLANS times an episode): the
  planner searches from that stance and the robot's configuration, without the failed move.
  ``agent.events`` lists these per episode.

The QP (OSQP), over joint and base accelerations qdd, contact-force cone coefficients lambda and
joint torques tau: min  w_c ||J_com qdd - a_com||^2 + w_l ||J_limb qdd - a_limb||^2
+ w_p ||qdd_joints - a_posture||^2 + w_o ||omega_dot - a_orient||^2 (+ small lambda, tau)
s.t. the dynamics M qdd = G + S^T tau + J_c^T K lambda (M from pybullet, velocity-product terms
neglected at these speeds), contact maintenance J_c qdd = -D J_c qd, lambda >= 0 (pyramidal
friction cones; grasps bounded by the grip force), |tau| <= tau_max, and clearance: a link other
than the limbs' (soles, forearms) within 3 cm of the scene accelerates away from it
(n^T J qdd >= KP (1 cm - d) - KD d', 2 cm for a trunk link, whose touch is a fall; soft: a slack
at a high cost; the QP has no contact force for such a link, so pressing on the scene made the
forces differ from its model). The a_* are PD
laws towards the FSM's targets. The QP's torques are the action (torque control); a control
step whose QP fails repeats the last solved torques.

Agent configuration: ``max_nodes`` (the planning budget in expanded stances, default
:data:`MAX_NODES`, for each of the planner's searches: on a slope climb a second search may
follow the first, :func:`taigym.planners.stance.plan`), ``time_limit`` (an optional wall-time
budget, s; default none, so that a plan does not depend on the machine's speed or load). The env
must be in torque control with a control step of at most 1/60 s (``taigym/MultiContact-v1``'s
defaults); ``make`` raises a ValueError otherwise.
``agent.plan`` holds the plan being executed (``status``, stances, configurations; after a
replan, the new one), ``agent.replans`` the replans of the episode; ``agent.qp_forces`` the last
QP's force on each support limb (N, world frame; compare with pybullet's contact forces).
"""

from __future__ import annotations

import numpy as np
import osqp
import pybullet as p
from scipy import sparse
from scipy.spatial.transform import Rotation

from taigym.planners import stance as st
from taigym.sim import humanoid as hum
from taigym.sim.constants import TORQUE_CONTROL_DT

from .base import Agent, check_ranges, planning

MAX_NODES = 400        # stances each of the planner's searches may expand (a node budget: plans do not depend on the load)
TOE_AHEAD = 0.15       # m, from a sole's centre to just past its toe (sole half length 0.11)
STEP_FACE = 0.05       # m, terrain this much higher than a sole just ahead of its toe is a step's face
FACE_CLEAR = 0.04      # m, a sole before a step's face draws back this far as it rises
LIFT = 0.07            # m, swing path clearance along the target surface's normal
PRESS = 0.01           # m, a landing limb aims this far past the surface, until it touches
SHIFT_TOL = 0.015      # m, CoM error that ends a shift
SHIFT_NEAR = 0.04      # m, or this if the next support alone balances the robot there
BALANCE_MARGIN = 0.005  # m, a CoM counts as balanced by a support that balances every CoM this near it
SHIFT_MARGINS = (0.05, 0.03, 0.02, 0.01)   # m, stability margins (largest admitted first) of a shift's CoM target
REACH_TOL = 0.02       # m, limb error (touching) that ends a swing
REACH_TOUCH_TOL = 0.05  # m, or this after 0.5 s touching (a forearm on a rail holds the hand off)
FLAT_TOL = 0.08        # rad, a landing sole's tilt from its surface that ends a swing
FLAT_WAIT = 1.0        # s on the final approach after which a touching sole need not be flat
LADDER_BACKOFF = 0.12  # m, a foot's swing path on a ladder stays this far off the plane of rungs
UNDER_RUNG_HEIGHT = 0.15  # m, a rung this little above a sole's centre (foot height 0.1) is over the foot
UNDER_RUNG_CLEAR = 0.03   # m, a foot under a rung first draws back till its toe is this far clear of it
LOAD_TIME = 0.6        # s, the new contact's forces ramp up over this
W_UNLOAD = 0.02        # per N^2 (cone coefficient), penalty on an unloaded contact's forces at full ramp
W_FORCE = 1e-3         # per N^2, a soft contact's force on the plan's (deformable supports; see the shift)
SOFT_COP = 0.5         # the fraction of a sole (about its centre) its centre of pressure may use on a pad
UNLOAD_TOL = 40.0      # N (a tenth of the weight), most a contact may carry when it is released
UNLOAD_WAIT = 1.5      # s a shift waits past its unload ramp for the contact to unload, then fails
MAX_REPLANS = 2        # replans an episode, each from the stance where a transition failed
SINK_SETTLE = 0.3      # s a shift onto a deformable support waits, unloaded, measuring the sinks
PHASE_TIMEOUT = 5.0    # s
CENTRE_WAIT = 1.0      # s, a centring before a swing ends this long after its reference, arrived or not
CENTRE_TOL = 0.005     # m, a CoM this close to its centring target needs no centring
SWING_RETRIES = 1      # a swing that timed out is tried again this many times, then abandoned
KP_COM, KP_LIMB, KP_POST, KP_ORI = 25.0, 30.0, 40.0, 40.0   # 1/s^2
DAMP_CONTACT = 20.0    # 1/s
W_COM, W_LIMB, W_POSTURE = 1000.0, 100.0, 1.0   # task weights (torso orientation 10); the CoM first
COM_SPEED = 0.1        # m/s, mean speed of the CoM reference in a phase
JOINT_SPEED = 0.5      # rad/s, mean speed of the posture reference
LIMB_SPEED = 0.3       # m/s, speed of a swinging limb's reference along its path
GRIP_REACH = 0.015     # m, a hand this close to a bar's surface closes its grip (the env grasps within 0.02)
HAND_PRESS = 15.0      # N, least normal force of a hand on a wall (lighter, it drifted off the wall)
CLEAR_NEAR = 0.03      # m, links other than the limbs' (soles, forearms) this near the scene are kept off it
CLEAR_MIN = 0.01       # m, the distance they are driven back to (a trunk link: the planner's TRUNK_CLEARANCE)
KP_CLEAR = 100.0       # 1/s^2, gain of that distance's acceleration bound
W_CLEAR = 1e4          # per (m/s^2)^2, penalty on violating that bound (a soft constraint: the QP stays feasible)


#: indices into JOINTS of each limb's chain (hip to ankle, shoulder to elbow)
_LIMB_JOINTS = {limb: np.array([k for k, name in enumerate(hum.JOINTS) if name.startswith(tuple(
    f"{limb.split('_')[0]}_{j}" for j in (("hip", "knee", "ankle") if limb.endswith("foot") else ("shoulder", "elbow"))))])
    for limb in hum.LIMBS}


def _kd(kp: float) -> float:
    return 2.0 * np.sqrt(kp)


class StanceAgent(Agent):
    """Stance planner + FSM + QP controller (module docstring)."""

    name = "stance"
    families = ("multicontact",)

    def __init__(self, env, max_nodes: int = MAX_NODES, time_limit: float | None = None, **cfg):
        if cfg:
            raise ValueError(f"unknown stance-agent option(s): {', '.join(sorted(cfg))}; accepted: max_nodes, time_limit")
        super().__init__(env, max_nodes=max_nodes, time_limit=time_limit)
        check_ranges(self.cfg, {"max_nodes": (1, 100000, "stances")})
        if time_limit is not None:
            check_ranges(self.cfg, {"time_limit": (0.0, 1e5, "s")})
        u = env.unwrapped
        # the QP controller computes joint torques: pybullet's position motors cannot render
        # them (the expert fell within 3-6 s in PD mode), and held for longer than 1/60 s they
        # lose the ladder (eval ladders 0 and 1 at 0.05 s)
        if u.control != "torque":
            raise ValueError(f"stance needs the env's control='torque' (its QP computes joint torques), got "
                             f"control={u.control!r}; use gym.make('taigym/MultiContact-v1') or control='torque'")
        if u.control_dt > TORQUE_CONTROL_DT + 1e-9:
            raise ValueError(f"stance needs the env's control_dt in [1/240, 1/60] s, got control_dt={u.control_dt!r}")
        self.time_limit, self.max_nodes = time_limit, int(max_nodes)
        self.plan = None
        self.model = None
        self._task = None

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        task = self.env.unwrapped.task
        if task is None:
            raise RuntimeError("call env.reset() before agent.reset()")
        if task != self._task:
            self.make_plan(task)
        self.plan = self._first_plan
        self.replans = 0
        self._exclude: set = set()          # moves that failed when executed, kept out of replans
        self.phases = self._phases() if self.plan.solved else []
        self.k, self.t_phase, self.grip = 0, 0.0, {h: False for h in hum.HANDS}
        self.events: list[tuple[int, str]] = []     # (phase index, what went wrong) this episode
        #: (limb, planned sink, simulated sink (m), planned and controller's vertical force (N)) of
        #: soles on a deformable support at the end of each shift (the contact to break unloaded:
        #: the next stance's support alone loaded)
        self.sink_log: list[tuple[str, float, float, float, float]] = []
        self._tau = np.zeros(21)     # N m, the last solved QP's joint torques

    @planning
    def make_plan(self, task) -> None:
        """Plan the stance sequence of ``task`` (and build the controller's model of its scene)."""
        if self.model is not None:
            self.model.close()
        self._first_plan = st.plan(task, time_limit=self.time_limit, max_nodes=self.max_nodes)
        self.model = st.StanceModel(task)
        self._bars = task.scene()[1]
        self._task = task

    def _com_of(self, step) -> np.ndarray:
        self.model.set((step.base_pos, step.base_quat, step.q))
        return self.model.robot.com_and_jacobian()[0]

    def _phases(self) -> list[dict]:
        """The FSM's states along the plan (module docstring)."""
        steps, stances, out = self.plan.steps, self.plan.stances, []
        for i in range(len(steps) - 1):
            sa, sb, b = set(stances[i]), set(stances[i + 1]), steps[i + 1]
            com = self._com_of(b)
            if len(sb) < len(sa):                      # Adj-: shift the CoM, then let go
                removed = sorted(sa - sb)
                com = self._held_com(sorted(sb), com)
                out.append(dict(kind="shift", support=sorted(sa), com=com, q=b.q, quat=b.base_quat,
                                unload=[c.limb for c in removed], next=sorted(sb), sinks=dict(b.sinks),
                                forces=_limb_forces(b)))
                out.append(dict(kind="release", support=sorted(sb), limbs=[c.limb for c in removed], com=com,
                                q=b.q, quat=b.base_quat))
            else:                                      # Adj+: swing the limb onto the new contact
                new = sorted(sb - sa)[0]
                surf = self.model.surfaces[new.surface]
                tgt, rot = self.model.target(new)
                normal = np.asarray(surf.normal, float)
                grip = new.limb in hum.HANDS and surf.kind == "bar"
                if grip:
                    normal = tgt - surf.point(new.u)
                    normal[1] = 0.0
                    normal /= np.linalg.norm(normal)
                before = [c for s in stances[:i + 1] for c in s if c.limb == new.limb]
                # a foot to or from a rung: it travels on the robot's side of the ladder
                rung = surf.kind == "bar" or (bool(before) and self.model.surfaces[before[-1].surface].kind == "bar")
                # on a deformable support the sole lands where it will stand once loaded: its sink
                # in the next step that loads it
                tgt = tgt - next((s.sinks[new.limb] for s in steps[i + 2:] if new.limb in s.sinks), 0.0) * normal
                out.append(dict(kind="swing", support=sorted(sa), limb=new.limb, contact=new, target=tgt, normal=normal,
                                com=com, q=b.q, quat=b.base_quat, grip=grip, rot=rot, rung=rung))
                out.append(dict(kind="load", support=sorted(sb), load=[new.limb], com=com, q=b.q,
                                quat=b.base_quat))
        out.append(dict(kind="hold", support=list(steps[-1].touching), com=self._com_of(steps[-1]),
                        q=steps[-1].q, quat=steps[-1].base_quat))
        return out

    # ------------------------------------------------------------------ control
    def act(self, obs, info: dict) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float64)
        q, qd = obs[0:21], obs[21:42]
        base, quat, v, w = obs[42:45], obs[45:49] / np.linalg.norm(obs[45:49]), obs[49:52], obs[52:55]
        action = np.zeros(23, dtype=np.float32)
        rob = self.model.robot
        rob.set_state(base, quat, q, v, w, qd)
        if not self.phases:
            # no plan: the QP holds the robot standing where it is on both soles (a PD posture
            # command read as torques in torque control dropped it within 1 s)
            feet = sorted(st.Contact(f, "floor", float(self.model.limb_ref(f)[0])) for f in hum.FEET)
            self.phases = [dict(kind="hold", support=feet, com=rob.com_and_jacobian()[0], q=q.copy(),
                                quat=quat.copy())]
        ph = self.phases[self.k]
        nu = np.r_[v, w, qd]
        com, Jc = rob.com_and_jacobian()
        if ph["kind"] == "swing" and self.t_phase == 0.0 and not ph.get("centred"):
            ph["centred"] = True
            c = self._centre(ph, com)
            if c is not None:
                ph = dict(kind="centre", support=ph["support"], com=c, q=q.copy(), quat=quat.copy())
                self.phases.insert(self.k, ph)
        timed_out = self.t_phase >= PHASE_TIMEOUT + ph.get("t_path", 0.0)
        done = timed_out and ph["kind"] != "swing"     # a swing that has not landed is never loaded
        limb_task = None
        free = None          # joints left out of the posture task (a swinging limb's, see the swing)
        if ph["kind"] == "release":
            for limb in ph["limbs"]:
                if limb in hum.HANDS:
                    self.grip[limb] = False
            done |= self.t_phase >= 0.3
        elif ph["kind"] == "swing":
            x = self.model.limb_ref(ph["limb"])
            err = np.linalg.norm(ph["target"] - x)
            # lifted path: rise off the old place to above the target's height, travel above
            # the target, come down onto it
            if "path" not in ph:
                above = ph["target"] + LIFT * ph["normal"]
                rise = x + 0.3 * (above - x)     # an arc: up to the target's height early on
                rise[2] = max(x[2], above[2]) + 0.03
                if ph["limb"] in hum.FEET and st.terrain_height(self.model, x[0] + TOE_AHEAD) > x[2] + STEP_FACE:
                    # a step's face just ahead of the toe: rise clear of it first, drawn back a
                    # little (moving forward as it rose, the toe dragged up the face and the foot
                    # pitched; the shin caught the step's edge and soft eval task 2 fell backwards)
                    rise[:2] = x[:2] - np.array([FACE_CLEAR, 0.0])
                press = ph["target"] - (0.0 if ph["grip"] else PRESS) * ph["normal"]
                # the posture task keeps the joints of an arm reaching for a wall (left free, the
                # hand never reached the gap family's wall: eval gaps 0-2 failed) and of a leg
                # stepping across a drop (eval gaps 6 and 8 fell); elsewhere they follow the path.
                # Decided where the swing began (a retry starts over the far edge)
                mid = 0.5 * (x[0] + ph["target"][0])
                drop = self._task.ground_height(mid) < min(x[2], ph["target"][2]) - STEP_FACE
                ph.setdefault("free", ph["grip"] if ph["limb"] in hum.HANDS else not drop)
                ph["path"] = ([rise] if ph["limb"] in hum.FEET else []) + [above, press]
                if ph["limb"] in hum.FEET and ph["rung"] and self.model.ladder_planes:
                    # to a rung: back off the ladder first, up on the robot's side of it, then
                    # in (straight up, the toe caught on the rung between; from the floor
                    # straight at it, the foot went in under the lowest rung and stuck there)
                    off = LADDER_BACKOFF * self.model.ladder_planes[0][1]
                    out = self._out_from_under_rung(x)
                    ph["path"] = ([out] if out is not None else []) + [
                        (x if out is None else out) + off, above + off, above, press]
                ph["t_way"], ph["ref"] = 0.0, x.copy()
                pts = [x] + ph["path"]       # the phase may last the path's time at LIMB_SPEED more
                ph["t_path"] = sum(np.linalg.norm(b - a) for a, b in zip(pts, pts[1:])) / LIMB_SPEED
            dt = self.env.unwrapped.control_dt
            ph["t_way"] += dt
            # the limb's reference moves towards the waypoint at LIMB_SPEED (a step to a far
            # waypoint would ask for accelerations that throw the body off balance); next
            # waypoint when the limb has reached this one, or 0.5 s after its reference did
            d = ph["path"][0] - ph["ref"]
            dist = np.linalg.norm(d)
            v_ref = d / dist * LIMB_SPEED if dist > LIMB_SPEED * dt else d / dt
            if dist > LIMB_SPEED * dt:
                ph["t_way"] = 0.0
            ph["ref"] = ph["ref"] + v_ref * dt
            if len(ph["path"]) > 1 and dist <= LIMB_SPEED * dt and (
                    np.linalg.norm(ph["path"][0] - x) < 0.03 or ph["t_way"] > 0.5):
                ph["path"].pop(0)
                ph["t_way"] = 0.0
            limb_task = (ph["limb"], ph["ref"], v_ref, ph.get("rot"))
            if ph["free"]:
                # the limb follows its path, not the posture reference: that interpolates its
                # joints straight to the landing pose, which drew a foot rising from the floor
                # forward into the step's face (soft eval tasks 1, 2, 4, 7 fell in that swing)
                free = _LIMB_JOINTS[ph["limb"]]
            touching = obs[55 + hum.LIMBS.index(ph["limb"])] > 0.5
            flat = True
            if ph.get("rot") is not None:
                # the angle between the sole's normal and the surface's (a yaw about the normal
                # leaves the sole flat; counted as tilt, it kept landed feet in the air till the timeout)
                cos_tilt = float(ph["rot"][:, 2] @ rob.limb_frame(ph["limb"])[1][:, 2])
                # a sole touching by an edge that has stopped turning flat for FLAT_WAIT lands
                # anyway: its load flattens it (it waited for the phase timeout, 5 s a step)
                flat = cos_tilt > np.cos(FLAT_TOL) or ph["t_way"] > FLAT_WAIT
            if ph["grip"]:
                # a hand grips when it is on its final approach and within reach of the bar
                # (the env makes the grasp within 2 cm of its surface; a hand pressed on the
                # rung 5 cm beside its target waited for the timeout); it has landed once the
                # grasp holds (obs: grasp flags)
                if len(ph["path"]) == 1 and (err < REACH_TOUCH_TOL or self._bar_distance(x) < GRIP_REACH):
                    self.grip[ph["limb"]] = True
                touching = obs[59 + hum.HANDS.index(ph["limb"])] > 0.5
            landed = touching and flat and len(ph["path"]) == 1 and dist <= LIMB_SPEED * dt
            if landed and (ph["grip"] or err < REACH_TOL or (err < REACH_TOUCH_TOL and ph["t_way"] > 0.5)):
                done = True
            elif timed_out and touching and err < REACH_TOUCH_TOL:
                done = True         # landed, not flat: a sole flattens when loaded
            elif (ph["limb"] in hum.HANDS and not ph["grip"] and err < REACH_TOL and len(ph["path"]) == 1
                  and dist <= LIMB_SPEED * dt and ph["t_way"] > FLAT_WAIT):
                # a hand held on its planned place (within REACH_TOL) but millimetres short of the
                # wall for FLAT_WAIT (the arm at full reach, the CoM task holding the body): the
                # load phase's pressing force closes the gap (it waited out both tries, then held)
                done = True
            elif timed_out:
                self._swing_timed_out(ph, obs)
        elif ph["kind"] == "load":
            done |= self.t_phase >= LOAD_TIME
        elif ph["kind"] == "centre":
            done |= self.t_phase >= ph.get("T", 1.0) and (
                np.linalg.norm(com[:2] - ph["com"][:2]) < SHIFT_TOL or self.t_phase >= ph["T"] + CENTRE_WAIT)
        if self.t_phase == 0.0:      # references move smoothly from where the phase starts
            ph["com0"], ph["q0"], ph["quat0"] = com.copy(), q.copy(), quat.copy()
            ph["T"] = max(1.0, np.linalg.norm(ph["com"][:2] - com[:2]) / COM_SPEED,
                          np.abs(ph["q"] - q).max() / JOINT_SPEED)
        s_ = min(1.0, self.t_phase / ph["T"])
        s_ = s_ * s_ * (3.0 - 2.0 * s_)
        ref = dict(com=ph["com0"] + s_ * (ph["com"] - ph["com0"]), q=ph["q0"] + s_ * (ph["q"] - ph["q0"]),
                   quat=(Rotation.from_quat(ph["quat0"]) * Rotation.from_rotvec(s_ * (
                       Rotation.from_quat(ph["quat0"]).inv() * Rotation.from_quat(ph["quat"])).as_rotvec())).as_quat(),
                   support=ph["support"], soft={})
        if free is not None:
            ref["free"] = free
        # force ramps: a new contact is loaded over LOAD_TIME; the contact to break is unloaded
        # over LOAD_TIME once the CoM has arrived over the next support (its error below
        # SHIFT_TOL after the reference's end), then released
        for limb in ph.get("load", ()):
            r = min(1.0, self.t_phase / LOAD_TIME)
            ref["soft"][limb] = W_UNLOAD * (1.0 - r) ** 2
        if ph["kind"] == "shift":
            e = np.linalg.norm(com[:2] - ph["com"][:2])
            if "t_arrived" not in ph and self.t_phase >= ph["T"]:
                if e < SHIFT_TOL or (e < SHIFT_NEAR and self._balanced(ph["next"], com)):
                    ph["t_arrived"] = self.t_phase
                elif self.t_phase >= ph["T"] + PHASE_TIMEOUT and self._balanced(ph["next"], com):
                    # settled short of the target (stance-leg joints on their limits) where the
                    # next support still balances it: let go (holding can only end the episode
                    # short of the goal)
                    ph["t_arrived"] = self.t_phase
                elif self.t_phase >= ph["T"] + PHASE_TIMEOUT:
                    # the CoM never got over the next support: releasing a contact now drops
                    # the robot; stay in this stance, back where the shift began (or replan)
                    self._shift_failed(ph, "shift timed out", obs)
            r = min(1.0, (self.t_phase - ph["t_arrived"]) / LOAD_TIME) if "t_arrived" in ph else 0.0
            for limb in ph["unload"]:
                ref["soft"][limb] = W_UNLOAD * r ** 2
            # on a deformable support the sinks follow the forces: as the contact to break unloads,
            # the soft contacts take the plan's forces (where its configuration stands sunk)
            ref["track"] = {limb: (f, W_FORCE * r) for limb, f in ph["forces"].items() if limb in ph["sinks"]}
            done = r >= 1.0
            if done and max(np.linalg.norm(self.qp_forces.get(limb, 0.0)) for limb in ph["unload"]) > UNLOAD_TOL:
                # the contact to break still carries load (the next support cannot take it all
                # where the CoM is): releasing it now throws the load on the others (eval slope 9:
                # 78 N on the released sole, a fall); wait, then give up the shift
                done = False
                if self.t_phase >= ph["t_arrived"] + LOAD_TIME + UNLOAD_WAIT:
                    self._shift_failed(ph, "unload failed", obs)
            if done and ph["sinks"]:
                # quasi-static, the next support alone loaded (the contact to break unloaded, not
                # yet released): the simulated sinks, averaged over SINK_SETTLE (the pad's dent
                # follows the controller's force ripple), against the plan's
                ph.setdefault("t_unloaded", self.t_phase)
                ph.setdefault("sink_samples", []).append(
                    [info.get("sink", {}).get(limb, np.nan) for limb in sorted(ph["sinks"])]
                    + [float(self.qp_forces.get(limb, np.zeros(3))[2]) for limb in sorted(ph["sinks"])])
                done = self.t_phase >= ph["t_unloaded"] + SINK_SETTLE
                if done:
                    mean = np.mean(ph["sink_samples"], axis=0)
                    k = len(ph["sinks"])
                    self.sink_log += [(limb, ph["sinks"][limb], float(mean[j]), float(ph["forces"][limb][2]),
                                       float(mean[k + j])) for j, limb in enumerate(sorted(ph["sinks"]))]
        self._qp(ref, com, Jc, nu, limb_task, quat)
        self.t_phase += self.env.unwrapped.control_dt
        if done and self.k < len(self.phases) - 1:
            self.k, self.t_phase = self.k + 1, 0.0
        for i, h in enumerate(hum.HANDS):
            action[21 + i] = 1.0 if self.grip[h] else -1.0
        # a QP that failed (OSQP's iteration limit) left ``_tau`` at the last solved QP's torques,
        # held for this step (the posture target's normalised action, sent as torques, kicked the
        # stance sole off eval slope 8: 3.9 kN on it, a fall)
        action[:21] = np.clip(self._tau / hum.TORQUE_LIMITS, -1, 1)
        return action

    def _out_from_under_rung(self, x: np.ndarray) -> np.ndarray | None:
        """Where a sole centred at ``x`` (pointing +x, at the ladder) that lies under a rung draws
        back to horizontally, its toe clear of the rung by UNDER_RUNG_CLEAR; None if it is not under
        one. Backing off along the ladder's normal (up and back) from there pushed the foot into
        the rung (eval ladders 3 and 23: 400 N on the foot, both swing tries timed out)."""
        out = None
        for centre, axis, _, radius, _ in self._bars:
            c = np.asarray(centre, float)
            if (isinstance(axis, str) and axis == "y" and 0.0 < c[2] - x[2] < UNDER_RUNG_HEIGHT
                    and abs(c[0] - x[0]) < hum.SOLE_HALF[0] + radius + UNDER_RUNG_CLEAR):
                back = c[0] - radius - hum.SOLE_HALF[0] - UNDER_RUNG_CLEAR
                if out is None or back < out[0]:
                    out = np.r_[back, x[1:]]
        return out

    def _bar_distance(self, x: np.ndarray) -> float:
        """Distance (m) from a hand centre to the nearest bar's surface."""
        out = np.inf
        for centre, axis, half, radius, _ in self._bars:
            ax = np.asarray({"x": (1, 0, 0), "y": (0, 1, 0)}[axis] if isinstance(axis, str) else axis, float)
            ax /= np.linalg.norm(ax)
            d = x - np.asarray(centre)
            s = float(np.clip(d @ ax, -half, half))
            out = min(out, float(np.linalg.norm(d - s * ax)) - radius - hum.HAND_RADIUS)
        return out

    def _held_com(self, support, com: np.ndarray) -> np.ndarray:
        """The CoM a shift aims at before ``support`` alone holds the robot: the planned one,
        moved to the nearest point whose SHIFT_MARGINS diamond ``support`` balances (the first
        margin it admits). A planned CoM on the edge of the region (0.4-0.6 cm inside on eval
        slopes 8 and 17) was tracked to 2 cm short of it, outside, and the shift stalled."""
        for r in SHIFT_MARGINS:
            c = st.com_target(self.model, support, self.model.robot.total_mass, com[:2], r)
            if c is not None:
                return np.r_[c, com[2]]
        return com

    def _centre(self, ph: dict, com: np.ndarray) -> np.ndarray | None:
        """Where the CoM goes, the limb held, before the swing ``ph`` from one sole; None if it is
        there already (within CENTRE_TOL) or the swing has another support.

        * With no grasp: the nearest point that sole (and any pressing hand) balances with a
          stability margin (``_held_com``). Eval gaps 6 and 13: released 2 cm inside the far
          sole's heel edge (the hand on the wall only pushes back), the CoM was driven back past
          it as the other leg began its 0.9 m swing across the gap and the robot fell; centred
          first (it stops 1.4 cm short of the 4 cm-margin target, 0.6 cm further in, at rest
          after 2 s), both cross.
        * A foot's swing from a sole on a deformable support (the trailing foot onto the pad, the
          rail hand grasped): the swing's own CoM target, moved inside the support's region
          (``_held_com``). The plans leave the CoM about 10 cm behind that sole's centre, the
          hand pushing it forward; the body pitched back as the leg rose and the CoM went back
          while its reference went forward (soft eval tasks 2, 7, 25 fell in that swing)."""
        support = ph["support"]
        feet = [c for c in support if c.limb in hum.FEET]
        if len(feet) != 1:
            return None
        grasps = [c for c in support if c.limb in hum.HANDS and self.model.surfaces[c.surface].kind == "bar"]
        onto_pad = ph["limb"] in hum.FEET and self.model.surfaces[feet[0].surface].solid is not None
        for aim, applies in ((com, not grasps), (ph["com"], onto_pad)):
            if applies:
                c = self._held_com(support, aim)
                if np.linalg.norm(c[:2] - com[:2]) > CENTRE_TOL:
                    return np.r_[c[:2], com[2]]
        return None

    def _balanced(self, support, com: np.ndarray) -> bool:
        """Whether ``support`` alone balances gravity with the CoM anywhere within BALANCE_MARGIN
        (1-norm) of ``com`` (the planner's stage-1 statics: forces in its friction cones, grasps
        bounded; one LP). The nearest balanced point of :func:`taigym.planners.stance.com_target`
        is not a test: its small-force term moved it 7 mm off CoMs that eval slope 14's next
        support balanced with a 1 cm margin, and the shift stalled."""
        r = st.stability_margin(self.model, support, self.model.robot.total_mass, com[:2])
        return r is not None and r[0] >= BALANCE_MARGIN

    def _swing_timed_out(self, ph: dict, obs) -> None:
        """A swing that did not land within its time: the limb is not loaded (the next stance
        would lean on a contact that is not there). Retry it from where the limb is, up to
        SWING_RETRIES times; then stay in the swing's stance (its support holds the robot, in
        equilibrium at the CoM target), the limb back in the posture it had when the swing began."""
        ph["tries"] = ph.get("tries", 0) + 1
        self.events.append((self.k, "swing timed out"))
        if ph["limb"] in hum.HANDS:
            self.grip[ph["limb"]] = False
        if ph["tries"] <= SWING_RETRIES:
            for key in ("path", "t_path", "t_way", "ref"):
                ph.pop(key, None)
            self.t_phase = -self.env.unwrapped.control_dt    # 0 after this step: fresh references
            return
        self.events.append((self.k, "swing aborted"))
        self.phases[self.k:] = [dict(kind="hold", support=ph["support"], com=ph["com"], q=ph["q0"],
                                     quat=ph["quat"])]
        self.t_phase = -self.env.unwrapped.control_dt
        self._replan(ph["support"], ("add", ph["limb"], ph["contact"].surface), obs)

    def _shift_failed(self, ph: dict, why: str, obs) -> None:
        """A shift that cannot release its contact: stay in its stance, back where it began, and
        replan from there without that release."""
        self.events.append((self.k, why))
        self.phases[self.k:] = [dict(kind="hold", support=ph["support"], com=ph["com0"], q=ph["q0"], quat=ph["quat0"])]
        self.t_phase = -self.env.unwrapped.control_dt
        self._replan(ph["support"], ("release", ph["unload"][0]), obs)

    @planning
    def _replan(self, stance, move: tuple, obs) -> None:
        """Plan again from ``stance`` and the robot's current configuration, without ``move``
        from that stance (nor any move that failed before this episode), at most MAX_REPLANS
        times an episode; on success the FSM follows the new plan from its first phase, else the
        robot keeps holding the stance."""
        if self.replans >= MAX_REPLANS:
            return
        self.replans += 1
        self._exclude.add((st.stance_key(stance), move))
        obs = np.asarray(obs, dtype=np.float64)
        x = (obs[42:45], obs[45:49] / np.linalg.norm(obs[45:49]), obs[:21])
        plan = st.plan(self._task, time_limit=self.time_limit, max_nodes=self.max_nodes, start=(stance, x),
                       exclude=frozenset(self._exclude))
        self.events.append((self.k, f"replanned: {plan.status}"))
        if plan.solved:
            self.plan = plan
            self.phases = self._phases()
            self.k = 0

    def _qp(self, ph: dict, com, Jc, nu, limb_task, quat) -> np.ndarray | None:
        model, rob = self.model, self.model.robot
        n = 27
        # pybullet's floating-base mass matrix is over (base angular, base linear) in the base
        # frame; ours over (linear, angular) in the world frame: M = T' Mp T
        R = Rotation.from_quat(quat).as_matrix()
        T = np.zeros((n, n))
        T[0:3, 3:6] = R.T
        T[3:6, 0:3] = R.T
        T[6:, 6:] = np.eye(21)
        Mp = rob.mass_matrix(self._q(rob))
        M = T.T @ Mp @ T
        G = rob.gravity_forces()
        # contact points and cone generators of the support
        Jrows, gens = [], []
        for c in ph["support"]:
            link = rob.link_index[hum.LIMB_LINK[c.limb]]
            fps = model.force_points(c)
            if c.limb in hum.FEET:
                o, Rf = rob.limb_frame(c.limb)
                pts = o + np.asarray(hum.LIMB_POINTS[c.limb]) @ Rf.T
                if model.surfaces[c.surface].kind == "bar":
                    pts = np.array([fp[0] for fp in fps])
                elif model.surfaces[c.surface].solid is not None:
                    # on a deformable support a moment tilts the sole into the pad: the forces'
                    # centre of pressure is kept to the sole's middle
                    pts = pts.mean(axis=0) + SOFT_COP * (pts - pts.mean(axis=0))
            else:
                pts = rob.limb_points(c.limb)
            Jl, _ = rob.jacobians(link, pts)
            kind, normal, mu = fps[0][1], fps[0][2], fps[0][3]
            # mu: the surface's times the planner's MU_MARGIN (the cones the plan's forces lie in)
            K = st.cone_generators(normal, mu) if kind == "cone" else st.GRASP_GENERATORS
            for J in Jl:
                Jrows.append(J)
                gens.append((J, K, kind, ph["soft"].get(c.limb, 0.0), c.limb))
        m = sum(g_[1].shape[1] for g_ in gens)
        # clearance: a link the QP gives no contact force (a shin or thigh by a rung or a step) may
        # not accelerate into the scene: d'' >= KP (CLEAR_MIN - d) - KD d' for its
        # points within CLEAR_NEAR (d from pybullet's closest points, d'' = n^T J qdd), a bound
        # with a slack s >= 0 that costs W_CLEAR s^2. Eval ladders 2 and 7: as the body rose in
        # the last swing, the stance shin pressed on the rung above its foot (40-60 N the QP did
        # not know of), the sole on the rung tipped to two points, the body yawed and fell.
        # The torso (pybullet's base, link -1) is kept off too: left out, it stood up into the slope's
        # rail in eval slope 14's last swing (a touch of the torso is a fall). A trunk link is driven
        # back to the planner's TRUNK_CLEARANCE: the env counts the torso as touching from 9.5 mm.
        # The limbs' own links (soles, forearms) are left out, touching or not: they make and break
        # contact on purpose; a released sole rests where it was till its swing lifts it (lifted
        # at the release instead, eval slopes 8, 10 and 15 fell) and a swinging limb lands.
        # A free leg (its foot in no contact of the support) is left out by a deformable support:
        # soft eval tasks 1, 4, 5, 8 and 10 fell as the trailing foot left the floor for the pad,
        # its shin 2-7 mm from the pad's edge (the foot on the floor 5 cm short of it): held off
        # the edge at a slack cost above the CoM task's, the QP let the body sink (the stance
        # sole's force 400 -> 130 N in 0.3 s). Kept for rungs: without it eval ladders 2 and 7
        # fell in their last swing.
        skip = {rob.link_index[hum.LIMB_LINK[limb]] for limb in hum.LIMBS}
        supported = {c.limb for c in ph["support"]}
        free_leg = {rob.link_index[f"{foot.split('_')[0]}_{seg}"] for foot in hum.FEET if foot not in supported
                    for seg in ("thigh", "shin")}
        trunk = {rob.link_index[name] for name in hum.TRUNK_LINKS}
        Jclr, b_clr = [], []
        for bid in model.scene_ids:
            for cp in p.getClosestPoints(rob.body, bid, CLEAR_NEAR, physicsClientId=model.client):
                if cp[3] in skip or (bid in model.soft_ids and cp[3] in free_leg):
                    continue
                Jn = np.asarray(cp[7]) @ rob.jacobians(cp[3], np.asarray(cp[5])[None])[0][0]
                Jclr.append(Jn)
                d_min = st.TRUNK_CLEARANCE if cp[3] in trunk else CLEAR_MIN
                b_clr.append(KP_CLEAR * (d_min - cp[8]) - _kd(KP_CLEAR) * float(Jn @ nu))
        k = len(Jclr)
        nx = n + m + 21 + k
        Jcon = np.vstack(Jrows) if Jrows else np.zeros((0, n))
        # objective
        H = np.zeros((nx, nx))
        g = np.zeros(nx)

        def task(J, a, w):
            H[:n, :n] += w * J.T @ J
            g[:n] -= w * J.T @ a

        vcom = Jc @ nu
        a_com = KP_COM * (ph["com"] - com) - _kd(KP_COM) * vcom
        task(Jc[:2], a_com[:2], W_COM)
        if limb_task is not None:
            limb, way, v_way, rot = limb_task
            link = rob.link_index[hum.LIMB_LINK[limb]]
            x = model.limb_ref(limb)
            Jl, Ja = rob.jacobians(link, x[None])
            a = KP_LIMB * (way - x) + _kd(KP_LIMB) * (v_way - Jl[0] @ nu)
            task(Jl[0], a, W_LIMB)
            if rot is not None:      # a sole lands flat on its surface
                er = Rotation.from_matrix(rot @ rob.limb_frame(limb)[1].T).as_rotvec()
                task(Ja, KP_ORI * er - _kd(KP_ORI) * (Ja @ nu), 10.0)
        a_post = KP_POST * (ph["q"] - self._q(rob)) - _kd(KP_POST) * nu[6:]
        Jp = np.zeros((21, n))
        Jp[:, 6:] = np.eye(21)
        if "free" in ph:
            keep = np.setdiff1d(np.arange(21), ph["free"])
            Jp, a_post = Jp[keep], a_post[keep]
        task(Jp, a_post, W_POSTURE)
        e_ori = (Rotation.from_quat(ph["quat"]) * Rotation.from_quat(quat).inv()).as_rotvec()
        Jo = np.zeros((3, n))
        Jo[:, 3:6] = np.eye(3)
        task(Jo, KP_ORI * e_ori - _kd(KP_ORI) * nu[3:6], 10.0)
        H[n:n + m, n:n + m] += 1e-4 * np.eye(m)   # small forces: no needless internal forces
        H[n + m:n + m + 21, n + m:n + m + 21] += 1e-4 * np.diag(1.0 / hum.TORQUE_LIMITS ** 2)
        H[n + m + 21:, n + m + 21:] += W_CLEAR * np.eye(k)
        H[:n, :n] += 1e-6 * np.eye(n)
        # constraints: dynamics, contacts, lambda >= 0, torque limits
        Bf = np.zeros((n, m))
        col, hi_l = 0, []
        press = np.zeros(m)      # a hand pushing on a wall presses with HAND_PRESS at least
        for J, K, kind, w_soft, limb in gens:
            if limb in hum.HANDS and kind == "cone" and w_soft == 0.0:
                press[col:col + K.shape[1]] = 1.0      # the normal force is the coefficients' sum
            Bf[:, col:col + K.shape[1]] = J.T @ K
            hi_l += [hum.GRIP_FORCE if kind == "grasp" else np.inf] * K.shape[1]
            H[n + col:n + col + K.shape[1], n + col:n + col + K.shape[1]] += w_soft * np.eye(K.shape[1])
            col += K.shape[1]
        for limb, (f_plan, w) in ph.get("track", {}).items():      # w ||sum K lambda - f_plan||^2
            sel = np.zeros((3, m))
            c0 = 0
            for _, K, _, _, lb in gens:
                if lb == limb:
                    sel[:, c0:c0 + K.shape[1]] = K
                c0 += K.shape[1]
            H[n:n + m, n:n + m] += w * sel.T @ sel
            g[n:n + m] -= w * sel.T @ f_plan
        S = np.zeros((n, 21))
        S[6:, :] = np.eye(21)
        A_dyn = np.hstack([M, -Bf, -S, np.zeros((n, k))])
        A_con = np.hstack([Jcon, np.zeros((len(Jcon), m + 21 + k))])
        A_box = np.eye(nx)[n:]
        A_clr = np.hstack([np.reshape(Jclr, (k, n)), np.zeros((k, m + 21)), np.eye(k)])
        A = np.vstack([A_dyn, A_con, A_box, np.r_[np.zeros(n), press, np.zeros(21 + k)][None], A_clr])
        b_con = -DAMP_CONTACT * (Jcon @ nu)
        lo = np.r_[G, b_con, np.zeros(m), -hum.TORQUE_LIMITS, np.zeros(k), HAND_PRESS if press.any() else 0.0,
                   b_clr]
        hi = np.r_[G, b_con, np.array(hi_l), hum.TORQUE_LIMITS, np.full(k, np.inf), np.inf, np.full(k, np.inf)]
        scale = 1.0 / max(np.abs(np.diag(H)).max(), 1e-9)
        solver = osqp.OSQP(algebra="builtin")
        solver.setup(sparse.csc_matrix(H * scale), g * scale, sparse.csc_matrix(A), lo, hi, verbose=False,
                     eps_abs=1e-5, eps_rel=1e-5, max_iter=4000, polishing=False)
        res = solver.solve(raise_error=False)
        self.qp_status = res.info.status
        if res.info.status not in ("solved", "solved inaccurate"):
            # no acceleration found that meets the contacts within the torque limits: the
            # caller repeats the last solved torques
            return None
        self._tau = res.x[n + m:n + m + 21]
        self.qp_forces, col = {}, n      # N, world frame: the QP's force on each support limb
        for _, K, _, _, limb in gens:
            self.qp_forces[limb] = self.qp_forces.get(limb, 0.0) + K @ res.x[col:col + K.shape[1]]
            col += K.shape[1]
        return res.x[:n]

    @staticmethod
    def _q(rob) -> np.ndarray:
        return np.array([s[0] for s in p.getJointStates(rob.body, [int(j) for j in rob.joints],
                                                        physicsClientId=rob.client)])


def _limb_forces(step) -> dict[str, np.ndarray]:
    """The plan step's total contact force on each limb (N, world frame)."""
    out: dict[str, np.ndarray] = {}
    for limb, _, f, *_ in step.points:
        out[limb] = out.get(limb, 0.0) + np.asarray(f, float)
    return out
