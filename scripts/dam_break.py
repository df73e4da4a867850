"""Dam break against Martin & Moyce (1952): surge front Z = x/a against T = t sqrt(2g/a) for a
column of width a and height 2a. Writes a PNG of simulation against experiment and prints the
relative errors over 0.5 <= T <= 2.5, raw and with the time origin aligned (the experiment's
release was not instantaneous). Ends with one line of JSON.

    python scripts/dam_break.py [--cells 128] [--out out/validation]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from taigym.sim import scenes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--out", type=Path, default=Path("out/validation"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    ref = scenes.MARTIN_MOYCE_N2_A225
    window = ref[(ref[:, 0] >= 0.5) & (ref[:, 0] <= 2.6)]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(ref[:, 0], ref[:, 1], "ks", label="Martin & Moyce 1952 (a = 2.25 in)")
    figures = {}
    for cells in args.cells:
        T, Z = scenes.run_dam_break(a=0.1, cells=cells, t_end_scaled=3.5)
        raw = np.interp(window[:, 0], T, Z) / window[:, 1] - 1.0
        shift, aligned = scenes.align_time_origin(T, Z, window)
        ax.plot(T, Z, "-", label=f"taigym FLIP, {cells} cells")
        ax.plot(T + shift, Z, "--", label=f"  time origin aligned (dT = {shift:.2f})")
        print(f"{cells} cells: raw errors {np.round(raw * 100, 1)} %, max {np.abs(raw).max():.1%}; "
              f"aligned by dT = {shift:.3f}: {np.round(aligned * 100, 1)} %, "
              f"max {np.abs(aligned).max():.1%}")
        figures.update({f"cells{cells}_max_rel_error_raw": round(float(np.abs(raw).max()), 4),
                        f"cells{cells}_time_shift": shift,
                        f"cells{cells}_max_rel_error_aligned": round(float(np.abs(aligned).max()), 4)})
    ax.axvspan(0.5, 2.5, color="0.9", zorder=0)
    ax.set_xlabel("T = t sqrt(2g/a)")
    ax.set_ylabel("Z = x / a")
    ax.set_xlim(0, 3.5)
    ax.set_title("Dam break: surge front")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = args.out / "dam_break.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
