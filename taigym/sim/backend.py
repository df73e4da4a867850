"""Explicit, lazy Taichi initialisation.

Taichi is never initialised at import. The first solver that needs it calls :func:`init`, which
chooses the arch explicitly (CPU by default). A GPU request on a machine without a usable GPU
falls back to the CPU with a warning: probing with ``ti.init(arch=ti.gpu)`` can segfault on a
headless machine without drivers, so availability is checked from the driver files first.
"""

from __future__ import annotations

import ctypes.util
import os
import time
import warnings

ARCHS = ("cpu", "gpu", "cuda", "vulkan")
#: s: Taichi holds its disk cache's lock file for the seconds a load or a dump takes; one older
#: than this was left by a killed process, and while it exists no process can use the cache
#: (each warns ``ticache.lock failed`` and compiles every kernel again, minutes for a solver)
STALE_LOCK_AGE = 600.0
_active: str | None = None


def _cuda_driver_present() -> bool:
    return os.path.exists("/dev/nvidia0") and ctypes.util.find_library("cuda") is not None


def clear_stale_cache_lock(cache_dir: str, max_age: float = STALE_LOCK_AGE) -> bool:
    """Remove ``cache_dir``'s ``ticache.lock`` if it is older than ``max_age`` seconds; return
    whether it was removed (with a warning)."""
    lock = os.path.join(cache_dir, "ticache.lock")
    try:
        age = time.time() - os.path.getmtime(lock)
        if age <= max_age:
            return False
        os.remove(lock)
    except FileNotFoundError:           # no lock, or another process removed it first
        return False
    warnings.warn(f"removed a stale Taichi cache lock ({lock}, {age / 60:.0f} min old) left by a killed "
                  "process; without this every kernel would compile again", RuntimeWarning, stacklevel=2)
    return True


def init(arch: str = "cpu", *, optimize: bool = True) -> str:
    """Initialise Taichi once per process and return the arch actually in use ("cpu" or "cuda").

    Re-initialising Taichi would free every field of every live solver, so a later call with a
    different arch keeps the first one and warns. ``optimize``: whether the first solver asks
    for Taichi's advanced IR optimisations (below; ``TAIGYM_FAST_COMPILE`` overrides it).
    """
    global _active
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    wanted = "cpu" if arch == "cpu" else ("cuda" if _cuda_driver_present() else "cpu")
    if arch != "cpu" and wanted == "cpu":
        warnings.warn(f"arch={arch!r} requested but no usable GPU was found; running on the CPU",
                      RuntimeWarning, stacklevel=2)
    if _active is not None:
        if wanted != _active:
            warnings.warn(f"Taichi already runs on {_active!r}; ignoring arch={arch!r}",
                          RuntimeWarning, stacklevel=2)
        return _active
    os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")  # offline runs can segfault at exit otherwise
    import taichi as ti
    from taichi.lang import impl

    clear_stale_cache_lock(os.environ.get("TI_OFFLINE_CACHE_FILE_PATH")
                           or impl.default_cfg().offline_cache_file_path)
    # fast_math off: reassociated float sums would break bit-identical CPU results across
    # batch sizes (kernels are recompiled per field shape).
    # Taichi's CFG pass costs minutes and GB of compile for no step speed, so it is never run;
    # the other advanced IR optimisations pay for the 2D solver, not for the 3D one (a compile
    # ~12x longer for steps ~8 % faster), so the first solver built asks (figures: docs/backend.md).
    # TAIGYM_FAST_COMPILE=1 turns them off, =0 on, whatever the first solver asks.
    fast = os.environ.get("TAIGYM_FAST_COMPILE")
    ti.init(arch=ti.cuda if wanted == "cuda" else ti.cpu, fast_math=False,
            default_fp=ti.f32, log_level=ti.WARN, offline_cache=True,
            advanced_optimization=optimize if fast is None else fast != "1",
            cfg_optimization=False)
    _active = wanted
    return _active


def active_arch() -> str | None:
    """The arch Taichi runs on, or None before initialisation."""
    return _active
