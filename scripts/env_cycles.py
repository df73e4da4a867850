"""Memory and time of repeated ``gym.make`` + ``reset`` + ``step`` + ``close`` cycles per env.

Sweeps, evaluation loops and tests make envs again and again, so a make must neither leak nor
recompile. Each env runs in its own process (so that one env's Taichi state or pybullet clients
do not count against another): ``--cycles`` times it makes the env, resets it (``seed`` = the
cycle: a new sampled task each time; ``--same-task``: seed 0 every time), takes one step of
zeros, closes it, collects garbage and reads the process's resident set size (RSS,
``/proc/self/status``).

Printed per env: the RSS after import and after every ``--every``-th cycle, the seconds of the
first cycle (it builds and compiles the solver, or loads it from Taichi's disk cache) and the
median of the later ones, and the verdict ``flat``: the least-squares slope of the RSS over the
cycles after ``--warmup`` is below ``--flat-mb`` MB per cycle. The last line is one JSON object
holding every figure.

``--src DIR`` also runs every env on another source tree (e.g. ``git archive main | tar -x -C
DIR``), interleaved with this one, so that before and after share the machine's load. Results go
to ``--out`` (JSON, written atomically after each env); a rerun with the same ``--out`` skips the
envs already done.

    python scripts/env_cycles.py [--envs pour,transport] [--cycles 50] [--every 5]
        [--src /tmp/main_src] [--out out/env_cycles.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

# id, keyword arguments of gym.make (None: the vector env of Pour-v0, 2 members)
ENVS = {
    "pour": ("taigym/Pour-v0", {}),
    "pour_simplified": ("taigym/Pour-v0", {"fidelity": "simplified"}),
    "pour_vector": ("taigym/Pour-v0", None),
    "pour3d": ("taigym/Pour3D-v0", {}),
    "transport": ("taigym/Transport-v0", {}),
    "transport3d": ("taigym/Transport3D-v0", {}),
    "multicontact": ("taigym/MultiContact-v1", {}),
}
VECTOR_ENVS = 2


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


def worker(name: str, cycles: int, src: str | None, same_task: bool) -> None:
    """Run the cycles of one env in this process; one JSON line per cycle on stdout."""
    if src:   # import taigym from ``src``, not from the editable install of this tree
        sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
        sys.path.insert(0, src)
    os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
    import gymnasium as gym
    import numpy as np

    import taigym  # noqa: F401  (registers the ids)

    env_id, kwargs = ENVS[name]
    print(json.dumps({"import_rss_mb": rss_mb(), "taigym": os.path.dirname(taigym.__file__)}), flush=True)
    for i in range(cycles):
        t0 = time.perf_counter()
        if kwargs is None:
            env = gym.make_vec(env_id, num_envs=VECTOR_ENVS, vectorization_mode="vector_entry_point")
        else:
            env = gym.make(env_id, **kwargs)
        t1 = time.perf_counter()
        env.reset(seed=0 if same_task else i)
        t2 = time.perf_counter()
        env.step(np.zeros(env.action_space.shape, env.action_space.dtype))
        t3 = time.perf_counter()
        env.close()
        del env
        gc.collect()
        print(json.dumps({"cycle": i + 1, "rss_mb": rss_mb(), "make_s": t1 - t0, "reset_s": t2 - t1,
                          "step_s": t3 - t2, "cycle_s": time.perf_counter() - t0}), flush=True)


def run_env(name: str, cycles: int, src: str | None, warmup: int, flat_mb: float, same_task: bool) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--cycles", str(cycles)]
    if same_task:
        cmd.append("--same-task")
    if src:
        cmd += ["--src", src]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    head, rows = (rows[0], rows[1:]) if rows else ({}, [])
    rss = [r["rss_mb"] for r in rows]
    secs = [r["cycle_s"] for r in rows]
    after = rss[warmup - 1:] if len(rss) > warmup else []    # from the end of cycle `warmup` on
    out = {"env": name, "tree": src or "this", "taigym": head.get("taigym"), "cycles_done": len(rows),
           "returncode": proc.returncode, "import_rss_mb": head.get("import_rss_mb"),
           "rss_mb": [round(v, 1) for v in rss],
           "first_cycle_s": secs[0] if secs else None,
           "later_cycle_s_median": statistics.median(secs[1:]) if len(secs) > 1 else None,
           "later_cycle_s_max": max(secs[1:]) if len(secs) > 1 else None,
           "growth_after_warmup_mb": (after[-1] - after[0]) if after else None,
           "slope_after_warmup_mb_per_cycle":   # least squares, MB per cycle
               statistics.linear_regression(range(len(after)), after).slope if len(after) > 1 else None,
           "wall_s": time.perf_counter() - t0}
    s = out["slope_after_warmup_mb_per_cycle"]
    out["flat"] = bool(proc.returncode == 0 and s is not None and s < flat_mb)
    if proc.returncode != 0:
        out["stderr_tail"] = proc.stderr[-2000:]
    return out


def report(r: dict, every: int) -> None:
    rss = r["rss_mb"]
    shown = [f"{k + 1}:{v:.0f}" for k, v in enumerate(rss)
             if k < 5 or (k + 1) % every == 0 or k == len(rss) - 1]
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    print(f"{r['env']:<16} [{r['taigym']}] rc={r['returncode']} cycles={r['cycles_done']} "
          f"import {fmt(r['import_rss_mb'], '.0f')} MB; RSS after cycle: {' '.join(shown)} MB", flush=True)
    print(f"{'':<16} first cycle {fmt(r['first_cycle_s'], '.2f')} s, later median "
          f"{fmt(r['later_cycle_s_median'], '.3f')} s (max {fmt(r['later_cycle_s_max'], '.2f')} s); "
          f"growth after warm-up {fmt(r['growth_after_warmup_mb'], '.1f')} MB, slope "
          f"{fmt(r['slope_after_warmup_mb_per_cycle'], '.2f')} MB/cycle -> "
          f"{'flat' if r['flat'] else 'NOT flat'}", flush=True)
    if "stderr_tail" in r:
        print(r["stderr_tail"], flush=True)


def save(path: str, results: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", default=",".join(ENVS), help=f"comma-separated, of {', '.join(ENVS)}")
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--every", type=int, default=5, help="print the RSS every k cycles (and the first 5)")
    ap.add_argument("--warmup", type=int, default=5, help="cycles before the flatness is judged")
    ap.add_argument("--flat-mb", type=float, default=1.0, help="flat: RSS slope below this, MB per cycle")
    ap.add_argument("--src", default=None, help="also run on this source tree (interleaved)")
    ap.add_argument("--src-only", action="store_true", help="run on --src's tree only")
    ap.add_argument("--src-cycles", type=int, default=None,
                    help="cycles on --src's tree (default --cycles; a leaking tree is slow)")
    ap.add_argument("--same-task", action="store_true",
                    help="reset to the same task (seed 0) every cycle, so that bounded per-task "
                         "caches (Pour-v0's outflow tables) do not grow")
    ap.add_argument("--out", default=None, help="results file (JSON); resumes from it")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.cycles, args.src, args.same_task)
        return
    names = args.envs.split(",")
    unknown = [n for n in names if n not in ENVS]
    if unknown or not 2 <= args.cycles <= 10_000 or args.warmup < 1 or args.every < 1:
        ap.error(f"--envs must be of {', '.join(ENVS)} (got unknown {unknown}); --cycles in [2, 10000]; "
                 f"--warmup and --every >= 1")
    results = {}
    if args.out and os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
    if args.src_only and not args.src:
        ap.error("--src-only needs --src")
    trees = ([] if args.src_only else [None]) + ([os.path.abspath(args.src)] if args.src else [])
    print(f"load: {open('/proc/loadavg').read().strip()}", flush=True)
    for name in names:
        for src in trees:
            key = f"{name}@{src or 'this'}"
            cycles = args.src_cycles if src and args.src_cycles else args.cycles
            if key not in results:
                results[key] = run_env(name, cycles, src, args.warmup, args.flat_mb, args.same_task)
                results[key]["cycles_asked"] = cycles
                if args.out:
                    save(args.out, results)
            report(results[key], args.every)
    print(f"load: {open('/proc/loadavg').read().strip()}", flush=True)
    summary = {k: {f: r[f] for f in ("cycles_done", "first_cycle_s", "later_cycle_s_median",
                                     "growth_after_warmup_mb", "slope_after_warmup_mb_per_cycle", "flat")}
               | {"rss_first_mb": r["rss_mb"][0] if r["rss_mb"] else None,
                  "rss_last_mb": r["rss_mb"][-1] if r["rss_mb"] else None}
               for k, r in results.items() if k.split("@")[0] in names}
    summary["all_flat"] = all(v["flat"] for k, v in summary.items() if k.endswith("@this"))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
