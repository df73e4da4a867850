"""Explicit, lazy Taichi initialisation.

Taichi is never initialised at import. The first solver that needs it calls :func:`init`, which
chooses the arch explicitly (CPU by default). A GPU request on a machine without a usable GPU
falls back to the CPU with a warning: probing with ``ti.init(arch=ti.gpu)`` can segfault on a
headless machine without drivers, so availability is checked from the driver files first.
"""

from __future__ import annotations

import ctypes.util
import os
import warnings

ARCHS = ("cpu", "gpu", "cuda", "vulkan")
_active: str | None = None


def _cuda_driver_present() -> bool:
    return os.path.exists("/dev/nvidia0") and ctypes.util.find_library("cuda") is not None


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
