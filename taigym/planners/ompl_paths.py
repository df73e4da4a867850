"""OMPL's InformedRRT* as the baseline path planner of issue 5 (``pip install taigym[ompl]``).

The same problems as SFRRT* (:mod:`taigym.planners.sfrrt` planar, :mod:`taigym.planners.sfrrt3d`
3D), solved by OMPL's InformedRRT* (path length objective) with the tilt bound as the state
bounds, then OMPL's path simplification; ``sfrrt(problem, ..., planner=plan_path_ompl)`` then
times the path exactly as for SFRRT* (Ruckig, SFTP), so the comparison is between the path
planners. OMPL's metric is Euclidean: the tilt coordinate is scaled by ``cfg.tilt_weight`` (m
per rad), as SFRRT*'s metric weighs it.
"""

from __future__ import annotations

import numpy as np

from .sfrrt import Problem, SFRRTConfig
from .sfrrt3d import Problem3D, config_3d

_seeded = False


def informed_rrt_star(start, goal, lo, hi, is_valid, resolution: float, time_budget: float,
                      seed: int = 0) -> np.ndarray:
    """A simplified InformedRRT* path (K, n) in the box [lo, hi] between ``start`` and ``goal``;
    ``is_valid(q)`` checks a state, motions are checked every ``resolution`` (same units).
    Raises RuntimeError if OMPL finds no exact solution within ``time_budget`` s."""
    from ompl import base as ob
    from ompl import geometric as og
    from ompl import util as ou

    global _seeded
    if not _seeded:                       # OMPL's seed is global and may be set once
        ou.setLogLevel(ou.LogLevel.LOG_ERROR)
        ou.RNG.setSeed(int(seed) + 1)
        _seeded = True
    n = len(start)
    space = ob.RealVectorStateSpace(n)
    bounds = ob.RealVectorBounds(n)
    for i in range(n):
        bounds.setLow(i, float(lo[i]))
        bounds.setHigh(i, float(hi[i]))
    space.setBounds(bounds)
    ss = og.SimpleSetup(space)
    ss.setStateValidityChecker(lambda s: bool(is_valid(np.array([s[i] for i in range(n)]))))
    states = []
    for q in (start, goal):
        s = space.allocState()
        for i in range(n):
            s[i] = float(q[i])
        states.append(s)
    ss.setStartAndGoalStates(*states)
    si = ss.getSpaceInformation()
    si.setStateValidityCheckingResolution(resolution / space.getMaximumExtent())
    ss.setPlanner(og.InformedRRTstar(si))
    ss.setOptimizationObjective(ob.PathLengthOptimizationObjective(si))
    if not (ss.solve(float(time_budget)) and ss.haveExactSolutionPath()):
        raise RuntimeError("InformedRRT*: no path found")
    ss.simplifySolution()
    path = ss.getSolutionPath()
    return np.array([[path.getState(k)[i] for i in range(n)] for k in range(path.getStateCount())])


def plan_path_ompl(problem: Problem, cfg: SFRRTConfig | None = None,
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """Planar: (x, z, tilt) waypoints, tilts within ``tilt_fraction`` x the max tilt."""
    from ..sim.collide2d import collides

    cfg = cfg or SFRRTConfig()
    w = cfg.tilt_weight
    bound = cfg.tilt_fraction * problem.theta_max * w
    W, H = problem.room
    scale = np.array([1.0, 1.0, w])

    def valid(s):
        return not collides(problem.hull, (s / scale)[None], problem.obstacles, problem.room)[0]

    path = informed_rrt_star(np.asarray(problem.start) * scale, np.asarray(problem.goal) * scale,
                             (0.0, 0.0, -bound), (W, H, bound), valid, cfg.check_step,
                             cfg.time_budget, 0 if rng is None else int(rng.integers(2 ** 31)))
    return path / scale


def plan_path3d_ompl(problem: Problem3D, cfg: SFRRTConfig | None = None,
                     rng: np.random.Generator | None = None) -> np.ndarray:
    """3D: positions of the upright container in the problem's workspace box."""
    cfg = cfg or config_3d()
    lo, hi = problem.bounds
    return informed_rrt_star(np.asarray(problem.start), np.asarray(problem.goal), lo, hi,
                             lambda p: not problem.collides_at(p), cfg.check_step, cfg.time_budget,
                             0 if rng is None else int(rng.integers(2 ** 31)))
