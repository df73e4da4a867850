"""Identify how the jet drag falls with the jet's thickness, from FLIP pours (Pan & Manocha 2016 model).

The jet drag lambda of ``scripts/sysid_pour.py`` (the relaxation rate of the jet's horizontal
speed, ``taigym.models.simplified``) was fitted on pours tilted over 2-4 s, whose jets are thin.
Here the same random monotone tilt curves are run 2-10x faster (0.3-1.5 s) on containers drawn
from Pour-v0's task distribution (an rng of its own: none of them is an eval task), so the
outflow ranges from thin jets to thick surges (sections beyond 3 cm). Each step's particles
are followed to where they cross 2, 5 and 8 cm below the lip (``taigym.models.sysid``), and the
model's path (the shipped coefficients, one step ahead from the recorded state) is compared with
them:

* per band of A, the lambda that puts the path through the crossings (least squares), against
  the shipped lambda, and the mean landing error with the shipped constant lambda and with the law;
* the law lambda(A) = lambda_fit * min(1, A_ref / A) (one A_ref fitted on the training pours of
  every shape; the exponent of A tried free, and an A_ref per shape), its held-out errors.

Writes ``drag_section`` = A_ref into ``taigym/models/data/outflow_coefficients.json``
(``--write``); records are cached in ``<out>/records`` (resumable). Ends with one JSON line.

    python scripts/sysid_jet_drag.py [--pours 24] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import numpy as np  # noqa: E402
from scipy.optimize import least_squares, minimize_scalar  # noqa: E402

from taigym.envs.pour import make_config  # noqa: E402
from taigym.envs.pour_tasks import sample_task  # noqa: E402
from taigym.models import sysid  # noqa: E402
from taigym.models.simplified import default_path, fit_for, path_x  # noqa: E402

ENV = make_config()
CELLS = int(round(sysid.WORLD_SIZE[0] / ENV.dx))
BANDS = (0.0, 0.008, 0.013, 0.018, 0.024, 0.032, 1.0)      # m, bands of the outflow section A


def pours(shape: str, viscosity: float, n: int, out: Path, batch: int) -> list:
    path = out / "records" / f"{shape}_{viscosity:g}_{n}_{CELLS}.npz"
    rng = np.random.default_rng([sum(map(ord, shape)), n, 4242])   # not sysid_pour's, not the eval split
    tasks = [sample_task(rng, source_container=shape) for _ in range(n)]
    wall = max(ENV.wall_thickness, 2.0 * sysid.WORLD_SIZE[0] / CELLS * (1.0 + 1e-9))
    containers = [t.source_shape(wall) for t in tasks]
    fills = [float(rng.uniform(0.5, 0.9)) for _ in range(n)]
    curves = [sysid.monotone_tilt_curve(rng, 60, duration_range=(0.3, 1.5)) for _ in range(n)]
    t0 = time.perf_counter()
    recs = sysid.cached_pours(path, containers, fills, viscosity, curves, cells=CELLS, batch_size=batch,
                              progress=lambda k, m: print(f"  {shape} mu={viscosity:g}: {k}/{m} pours "
                                                          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr))
    return recs


def rows_of(recs, viscosity: float) -> np.ndarray:
    """Per step and level: (A, x0, y0, carried v_x, v_x, v_y, level, x simulated, particles,
    lambda shipped) of the shipped model's outflow path against the particles' crossings."""
    out = []
    for rec in recs:
        fit = fit_for(rec.shape.shape, viscosity)
        for s in sysid.flight_samples([rec], fit):
            out.append((s[0].section, *s[0].start, s[0].carried[0], *s[0].velocity, s[1], s[2], s[3],
                        fit.drag))
    return np.array(out)


def landing_x(r: np.ndarray, lam: np.ndarray) -> np.ndarray:
    x0, y0, rvx, vx, vy, level = r[:, 1:7].T
    tau = (vy + np.sqrt(np.maximum(vy * vy + 2.0 * sysid.GRAVITY * (y0 - level), 0.0))) / sysid.GRAVITY
    return path_x(x0, vx, tau, lam, rvx)


def law(r: np.ndarray, a_ref: float, power: float = 1.0) -> np.ndarray:
    a, lam = r[:, 0], r[:, 9]
    return lam * np.minimum(1.0, (a_ref / np.maximum(a, 1e-9)) ** power)


def mean_err(r: np.ndarray, lam) -> float:
    return float(np.average(landing_x(r, lam) - r[:, 7], weights=r[:, 8])) if len(r) else float("nan")


def rms_err(r: np.ndarray, lam) -> float:
    e = landing_x(r, lam) - r[:, 7]
    return float(np.sqrt(np.average(e * e, weights=r[:, 8]))) if len(r) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["rect", "frustum", "cup", "oval"])
    ap.add_argument("--viscosities", nargs="+", type=float, default=[1e-3, 0.1])
    ap.add_argument("--pours", type=int, default=24, help="pours per shape and viscosity")
    ap.add_argument("--held-out", type=float, default=0.25)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("out/jet_drag"))
    ap.add_argument("--write", action="store_true", help="store A_ref in the shipped coefficients")
    args = ap.parse_args()

    by_shape = {}                                   # shape: (training rows, held-out rows)
    for shape in args.shapes:
        tr, te = [], []
        for mu in args.viscosities:
            recs = pours(shape, mu, args.pours, args.out, args.batch)
            k = len(recs) - max(1, int(round(args.held_out * len(recs))))
            tr.append(rows_of(recs[:k], mu))
            te.append(rows_of(recs[k:], mu))
        by_shape[shape] = (np.concatenate(tr), np.concatenate(te))
    train = np.concatenate([v[0] for v in by_shape.values()])
    test = np.concatenate([v[1] for v in by_shape.values()])
    sw = np.sqrt(train[:, 8])

    def residual(lam):
        return (landing_x(train, lam) - train[:, 7]) * sw

    def fit_a_ref(r: np.ndarray) -> float:
        return float(minimize_scalar(lambda a: np.sum(((landing_x(r, law(r, a)) - r[:, 7]) ** 2) * r[:, 8]),
                                     bounds=(0.002, 0.08), method="bounded").x)

    a_ref = fit_a_ref(train)
    free = least_squares(lambda p: residual(law(train, p[0], p[1])), [a_ref, 1.0],
                         bounds=([0.002, 0.0], [0.08, 4.0])).x
    per_shape = {}
    for shape, (tr, te) in by_shape.items():
        a = per_shape[shape] = fit_a_ref(tr)
        print(f"{shape}: A_ref fitted on its training pours alone {1000 * a:.1f} mm; held-out RMS "
              f"constant lambda {1000 * rms_err(te, te[:, 9]):.1f} mm, law with the common A_ref "
              f"{1000 * rms_err(te, law(te, a_ref)):.1f} mm, with its own {1000 * rms_err(te, law(te, a)):.1f} mm")
    own = np.concatenate([law(te, per_shape[s]) for s, (_, te) in by_shape.items()])
    print(f"held-out RMS over all shapes: common A_ref {1000 * rms_err(test, law(test, a_ref)):.2f} mm, "
          f"per-shape A_ref {1000 * rms_err(test, own):.2f} mm")
    print(f"identification pours: {len(args.shapes)} shapes x {len(args.viscosities)} viscosities x "
          f"{args.pours} (train {len(train)} / held-out {len(test)} step-levels, "
          f"{int(train[:, 8].sum())} / {int(test[:, 8].sum())} particle crossings)")
    print(f"fitted A_ref = {1000 * a_ref:.1f} mm (lambda = lambda_fit * min(1, A_ref / A)); "
          f"with the exponent free: A_ref {1000 * free[0]:.1f} mm, exponent {free[1]:.2f}")
    print("| A band (mm) | crossings train | lambda fitted on the band / shipped (1/s) | "
          "held-out mean error, shipped constant lambda (mm) | with the law (mm) | drag-free (mm) | "
          "held-out RMS, constant / law (mm) |")
    print("|---|---|---|---|---|---|---|")
    bands = []
    for lo, hi in zip(BANDS[:-1], BANDS[1:]):
        tr = train[(train[:, 0] >= lo) & (train[:, 0] < hi)]
        te = test[(test[:, 0] >= lo) & (test[:, 0] < hi)]
        if len(tr) < 3:
            continue
        s = minimize_scalar(lambda m, r=tr: np.sum(((landing_x(r, m * r[:, 9]) - r[:, 7]) ** 2) * r[:, 8]),
                            bounds=(0.0, 3.0), method="bounded").x
        lam0 = float(np.average(tr[:, 9], weights=tr[:, 8]))
        row = {"band_mm": [1000 * lo, min(1000 * hi, 999)], "crossings": int(tr[:, 8].sum()),
               "lambda_band": s * lam0, "lambda_shipped": lam0,
               "mean_const_mm": 1000 * mean_err(te, te[:, 9]), "mean_law_mm": 1000 * mean_err(te, law(te, a_ref)),
               "mean_free_mm": 1000 * mean_err(te, 0.0),
               "rms_const_mm": 1000 * rms_err(te, te[:, 9]), "rms_law_mm": 1000 * rms_err(te, law(te, a_ref))}
        bands.append(row)
        print(f"| {row['band_mm'][0]:.0f}-{row['band_mm'][1]:.0f} | {row['crossings']} | "
              f"{row['lambda_band']:.1f} / {lam0:.1f} | {row['mean_const_mm']:+.1f} | {row['mean_law_mm']:+.1f} | "
              f"{row['mean_free_mm']:+.1f} | {row['rms_const_mm']:.1f} / {row['rms_law_mm']:.1f} |")
    total = {"rms_const_mm": 1000 * rms_err(test, test[:, 9]), "rms_law_mm": 1000 * rms_err(test, law(test, a_ref)),
             "mean_const_mm": 1000 * mean_err(test, test[:, 9]), "mean_law_mm": 1000 * mean_err(test, law(test, a_ref))}
    print(f"held-out, all steps: RMS {total['rms_const_mm']:.1f} mm (constant lambda) -> "
          f"{total['rms_law_mm']:.1f} mm (law); mean {total['mean_const_mm']:+.1f} -> {total['mean_law_mm']:+.1f} mm")
    if args.write:
        path = default_path()
        data = json.loads(path.read_text())
        for f in data["fits"]:
            f["drag_section"] = round(a_ref, 5)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=1))
        os.replace(tmp, path)
        print(f"wrote drag_section {a_ref:.5f} m to {path}")
    print(json.dumps({"a_ref_mm": round(1000 * a_ref, 2), "free_a_ref_mm": round(1000 * free[0], 2),
                      "free_exponent": round(float(free[1]), 3), **{k: round(v, 2) for k, v in total.items()},
                      "bands": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in b.items()}
                                for b in bands]}))


if __name__ == "__main__":
    main()
