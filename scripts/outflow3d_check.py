"""Does Pan & Manocha 2016's 2D outflow model predict the 3D outflow of an axisymmetric source?

The ``sqp`` expert on Pour3D-v0 plans with the simplified model on S's cross-section: the 2D
tables of :mod:`taigym.models.outflow_tables` and the coefficients identified from 2D FLIP
pours. This script tilts containers of Pour3D's split distribution (the 2D section revolved
about the axis) along the system identification's random monotone tilt curves
(``taigym.models.sysid.monotone_tilt_curve``: to 1.6-2.4 rad in 2-4 s, then held) about their
frame origin, in the 3D FLIP solver (``sim.World3D``, ``--dx``) and in 2D FLIP (``World2D`` at
Pour-v0's cells), and runs the model along the same curves from the same fill. It prints, per
shape and viscosity, the RMS over the pours' steps of the fraction of the liquid left in S:
model vs 3D, 2D FLIP vs 3D, model vs 2D FLIP (the error the model was identified to), and when
half the liquid had left (t50) in each. Ends with one JSON line.

    python scripts/outflow3d_check.py [--curves 6] [--dx 0.007] [--viscosities 1e-3 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import numpy as np  # noqa: E402

from taigym.envs.pour import make_config  # noqa: E402
from taigym.envs.pour3d_tasks import SOURCE_SHAPES, sample_task  # noqa: E402
from taigym.models import sysid  # noqa: E402
from taigym.models.simplified import fit_for  # noqa: E402

DT = sysid.DT
SIZE3 = (0.4, 0.4, 0.16)                       # m, S's origin at the centre (x, y); z across
PIVOT3 = (0.2, 0.2, 0.08)


def simulate_3d(containers, fills, viscosity, curves, dx: float, batch: int = 4) -> list[np.ndarray]:
    """Fraction of the liquid in S after each step (n + 1,) of each pour in World3D."""
    from taigym.sim import World3D

    cap = max(int(1.1 * c.liquid_volume(f) / (0.5 * dx) ** 3) + 64 for c, f in zip(containers, fills))
    world = World3D(size=SIZE3, cells=int(np.ceil(SIZE3[0] / dx)), viscosity=viscosity, batch_size=batch,
                    max_particles=cap)
    world.add_body(containers[0], (*PIVOT3, 0.0, 0.0, 0.0))
    world.build()
    out = []
    for start in range(0, len(containers), batch):
        idx = [min(start + b, len(containers) - 1) for b in range(batch)]
        for b, k in enumerate(idx):
            world.clear_liquid(member=b)
            world.set_body(0, containers[k], (*PIVOT3, 0.0, 0.0, 0.0), member=b)
            world.reseed(k, member=b)
            world.fill_body(0, fills[k], member=b)
        steps = max(len(curves[k]) for k in idx) - 1
        leans = np.array([np.pad(curves[k], (0, steps + 1 - len(curves[k])), mode="edge") for k in idx])
        n0 = np.array([world.particle_count(b) for b in range(batch)], float)
        frac = [world.in_body_counts()[:, 0] / n0]
        for i in range(steps):
            poses = np.zeros((batch, 1, 6))
            vels = np.zeros((batch, 1, 6))
            poses[:, 0, :3] = PIVOT3
            poses[:, 0, 5] = -leans[:, i]                       # pour to the right (+x)
            vels[:, 0, 5] = -(leans[:, i + 1] - leans[:, i]) / DT
            world.set_poses(poses, vels)
            world.advance(DT)
            frac.append(world.in_body_counts()[:, 0] / n0)
        frac = np.array(frac)
        for b, k in enumerate(idx[:min(batch, len(containers) - start)]):
            out.append(frac[:len(curves[k]), b])
    return out


def t_half(f: np.ndarray) -> float:
    below = np.flatnonzero(f <= 0.5)
    return float(below[0] * DT) if len(below) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--curves", type=int, default=6, help="pours per shape and viscosity")
    ap.add_argument("--dx", type=float, default=0.007)
    ap.add_argument("--viscosities", nargs="+", type=float, default=[1e-3, 0.1])
    args = ap.parse_args()
    cells2d = int(round(sysid.WORLD_SIZE[0] / make_config().dx))
    wall = max(0.01, 2 * args.dx)
    figures, rows = {}, []
    print("| source | viscosity (Pa s) | pours | RMS in S: model vs 3D | 2D FLIP vs 3D | model vs 2D FLIP | "
          "t50 3D / model / 2D FLIP (s, mean) |")
    print("|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for shape in SOURCE_SHAPES:
        rng = np.random.default_rng([sum(map(ord, shape)), 3])
        tasks = []
        while len(tasks) < args.curves:
            t = sample_task(rng)
            if t.source_container == shape:
                tasks.append(t)
        curves = [sysid.monotone_tilt_curve(rng, 80) for _ in tasks]
        fills = [t.fill for t in tasks]
        for mu in args.viscosities:
            f3 = simulate_3d([t.source_shape(wall) for t in tasks], fills, mu, curves, args.dx)
            sections = [t.source_section(2 * sysid.WORLD_SIZE[0] / cells2d) for t in tasks]
            recs = sysid.simulate_pours(sections, fills, mu, curves, cells=cells2d, batch_size=4)
            f2 = [r.volume / r.volume[0] for r in recs]
            model = fit_for(shape, mu)
            fm = [sysid.predict(r, model)[1] / r.volume[0] for r in recs]
            err = {name: float(np.sqrt(np.mean(np.concatenate([(a - b) ** 2 for a, b in zip(x, y)]))))
                   for name, (x, y) in (("model_vs_3d", (fm, f3)), ("flip2d_vs_3d", (f2, f3)),
                                        ("model_vs_flip2d", (fm, f2)))}
            t50 = [float(np.nanmean([t_half(f) for f in fs])) for fs in (f3, fm, f2)]
            print(f"| {shape} | {mu:g} | {len(tasks)} | {err['model_vs_3d']:.3f} | {err['flip2d_vs_3d']:.3f} | "
                  f"{err['model_vs_flip2d']:.3f} | {t50[0]:.2f} / {t50[1]:.2f} / {t50[2]:.2f} |", flush=True)
            figures[f"{shape}_{mu:g}"] = {**{k: round(v, 4) for k, v in err.items()},
                                          "t50_3d_model_2d": [round(v, 2) for v in t50]}
            rows.append(err)
    for k in ("model_vs_3d", "flip2d_vs_3d", "model_vs_flip2d"):
        figures[f"mean_{k}"] = round(float(np.mean([r[k] for r in rows])), 4)
    figures["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
