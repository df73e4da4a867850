"""Identify Pan & Manocha 2016's simplified liquid model from particle simulations (Pan & Manocha 2016 Figs. 7-8).

For each source container shape and viscosity: simulate ``--curves`` pours along random monotone
tilt curves (containers and fills drawn from Pour-v0's task distribution), fit the outflow
regression on the training pours for several candidate sets of regressors, choose the set with
the lowest held-out error, and report, per shape and viscosity, the closed-loop prediction
error of u and V(t) on the held-out pours. Writes

* ``<out>/records/*.npz``  the simulated pours (reused when the script is run again: resumable),
* ``<out>/sysid.md``        the error table, ``<out>/sysid.png`` predicted vs simulated u and V(t),
* ``taigym/models/data/outflow_coefficients.json`` (``--coefficients``) the fitted coefficients,

and ends with one JSON line of figures. ``python scripts/sysid_pour.py --curves 16`` is a quick run.
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

from taigym.envs.pour import make_config  # noqa: E402
from taigym.envs.pour_tasks import sample_task  # noqa: E402
from taigym.models import sysid  # noqa: E402
from taigym.models.simplified import TERMS, default_path, load_fits  # noqa: E402

CANDIDATE_TERMS = (
    ("bernoulli", "constant"),                                   # Bernoulli alone
    ("bernoulli", "previous", "constant"),
    ("bernoulli", "wall_slide", "previous", "constant"),
    TERMS,                                                       # all five
)
# the particle env's grid and walls at its default resolution: the model stands in for that
# solver, whose thin jets depend on the cell size
ENV = make_config()
CELLS = int(round(sysid.WORLD_SIZE[0] / ENV.dx))                   # across the 0.4 m world


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=path.suffix)
    with os.fdopen(fd, "wb") as f:
        write(f)
    os.replace(tmp, path)


def pours(shape: str, viscosity: float, n: int, cells: int, batch: int, out: Path) -> list:
    """The simulated pours of one (shape, viscosity), from the record file or simulated."""
    # v3: records with the outflow's mean velocity and its streamlines (older files lack them)
    path = out / "records" / f"{shape}_{viscosity:g}_{n}_{cells}_v3.npz"
    rng = np.random.default_rng([sum(map(ord, shape)), n])   # same pours for every viscosity
    tasks = [sample_task(rng, source_container=shape) for _ in range(n)]
    wall = max(ENV.wall_thickness, 2.0 * sysid.WORLD_SIZE[0] / cells * (1.0 + 1e-9))
    containers = [t.source_shape(wall) for t in tasks]
    fills = [t.fill for t in tasks]
    curves = [sysid.monotone_tilt_curve(rng, 100) for _ in range(n)]
    t0 = time.perf_counter()
    recs = sysid.cached_pours(
        path, containers, fills, viscosity, curves, cells=cells, batch_size=batch,
        progress=lambda k, m: print(f"  {shape} mu={viscosity:g}: {k}/{m} pours "
                                    f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr))
    return recs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["rect", "frustum", "cup", "oval"])
    ap.add_argument("--viscosities", nargs="+", type=float, default=[1e-3, 1e-2, 0.1])
    ap.add_argument("--curves", type=int, default=64, help="pours per shape and viscosity")
    ap.add_argument("--held-out", type=float, default=0.25, help="fraction of pours held out")
    ap.add_argument("--cells", type=int, default=CELLS,
                    help="grid cells across the 0.4 m world (default: the Pour env's cell size)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("out/sysid"))
    ap.add_argument("--coefficients", type=Path, default=default_path())
    args = ap.parse_args()

    # the thick jets' drag law (scripts/sysid_jet_drag.py) is kept: lambda is fitted as the thin jet's
    try:
        a_ref = max(f.drag_section for fs in load_fits(str(args.coefficients)).values() for f in fs)
    except FileNotFoundError:
        a_ref = 0.0
    data = {}
    for shape in args.shapes:
        for mu in args.viscosities:
            recs = pours(shape, mu, args.curves, args.cells, args.batch, args.out)
            n_test = max(1, int(round(args.held_out * len(recs))))
            data[shape, mu] = (recs[:-n_test], recs[-n_test:])

    # one regressor set for all: the candidate with the lowest mean held-out error
    scores = {}
    for terms in CANDIDATE_TERMS:
        errs = [sysid.prediction_errors(r, sysid.fit(train, terms))
                for train, test in data.values() for r in test]
        scores[terms] = (float(np.mean([e["volume"] for e in errs])),
                         float(np.mean([e["speed"] for e in errs])))
    best = min(scores, key=lambda t: scores[t][0] + scores[t][1])

    rows, fits, figures = [], [], {}
    for (shape, mu), (train, test) in data.items():
        f = sysid.fit(train, best, a_ref)
        bern = sysid.fit(train, CANDIDATE_TERMS[0])
        e = [sysid.prediction_errors(r, f) for r in test]
        eb = [sysid.prediction_errors(r, bern) for r in test]
        ev, eu = np.mean([x["volume"] for x in e]), np.mean([x["speed"] for x in e])
        jet_rms, jet_mean = sysid.streamline_errors(test, f)
        rows.append((shape, mu, len(train), len(test), ev, eu,
                     np.mean([x["volume"] for x in eb]), np.mean([x["speed"] for x in eb]), f,
                     jet_rms, jet_mean))
        fits.append(f.to_dict())
        figures[f"{shape}_{mu:g}"] = {"volume_rms": round(float(ev), 4), "speed_mae": round(float(eu), 4),
                                      "jet_rms_mm": round(1000 * jet_rms, 1)}

    lines = ["| shape | viscosity (Pa s) | train / held-out pours | V(t) RMS error / V0 | u mean abs error / mean u | "
             "Bernoulli only: V, u | jet path error 2-8 cm below the lip: RMS, mean (mm) | discharge k | "
             "jet offset at lean 1, 2 rad (deg) | jet drag lambda (1/s) | weights |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for shape, mu, ntr, nte, ev, eu, bv, bu, f, jr, jm in rows:
        w = ", ".join(f"{t} {x:+.3f}" for t, x in zip(f.terms, f.weights))
        a, b = f.direction
        lines.append(f"| {shape} | {mu:g} | {ntr} / {nte} | {ev:.3f} | {eu:.3f} | {bv:.3f}, {bu:.3f} | "
                     f"{1000 * jr:.1f}, {1000 * jm:+.1f} | {f.discharge:.3f} | "
                     f"{np.degrees(a + b):+.0f}, {np.degrees(a + 2 * b):+.0f} | {f.drag:.1f} | {w} |")
    lines += ["", "Regressor sets (mean held-out error over all shapes and viscosities: V, u):"]
    lines += [f"- {', '.join(t)}: {v:.3f}, {u:.3f}{'  <- chosen' if t == best else ''}"
              for t, (v, u) in scores.items()]
    table = "\n".join(lines)
    print(table)
    _atomic_write(args.out / "sysid.md", lambda f: f.write((table + "\n").encode()))
    _atomic_write(args.coefficients, lambda f: f.write(json.dumps(
        {"about": "Pan & Manocha 2016 outflow regression, fitted by scripts/sysid_pour.py",
         "cells_per_metre": args.cells / sysid.WORLD_SIZE[0], "pours": args.curves,
         "fits": fits}, indent=1).encode()))
    _plot(data, best, args.out / "sysid.png")
    print(json.dumps({"terms": list(best), **figures}))


def _plot(data, terms, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = list(dict.fromkeys(k[0] for k in data))
    mus = list(dict.fromkeys(k[1] for k in data))
    fig, axes = plt.subplots(len(shapes), 2 * len(mus), figsize=(3.0 * 2 * len(mus), 2.3 * len(shapes)),
                             squeeze=False)
    for (shape, mu), (train, test) in data.items():
        row, col = shapes.index(shape), 2 * mus.index(mu)
        f = sysid.fit(train, terms)
        r = test[0]
        u_hat, v_hat = sysid.predict(r, f)
        t = np.arange(len(r.volume)) * sysid.DT
        ax = axes[row, col]
        ax.plot(t[1:], r.speed, color="tab:green", lw=0.8, label="u simulated")
        ax.plot(t[1:], u_hat, color="tab:blue", label="u model")
        ax.set_title(f"{shape}, {mu:g} Pa s: u (m/s)", fontsize=8)
        ax2 = axes[row, col + 1]
        ax2.plot(t, r.volume / r.volume[0], color="tab:gray", label="V simulated")
        ax2.plot(t, v_hat / r.volume[0], color="tab:orange", label="V model")
        ax2.plot(t, r.lean / np.pi, color="tab:red", lw=0.8, ls=":", label="lean / pi")
        ax2.set_title(f"{shape}, {mu:g} Pa s: V / V0", fontsize=8)
        if row == len(shapes) - 1:
            ax.set_xlabel("t (s)")
            ax2.set_xlabel("t (s)")
    axes[0, 0].legend(fontsize=6)
    axes[0, 1].legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
