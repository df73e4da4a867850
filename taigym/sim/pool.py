"""Built liquid solvers kept for reuse within a process, so that making an env again neither
leaks nor recompiles.

Taichi compiles a solver's kernels for each solver object (seconds for a 2D grid, tens of
seconds for a 3D one) and keeps its fields until ``ti.reset()``, which would free every other
live solver too. An env that built a new world on every make and dropped it on close would leak
its fields and compiled kernels and pay the compilation again. Instead, a closed env hands its
world (or carried container) back with :func:`give`, and the next env asking for the same key
:func:`take`s it. The key holds everything fixed at construction (grid, capacity, arch, ...);
the env's reset sets all the rest (bodies, liquid, viscosity, jitter seed), so a reused world
gives the same transitions as a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

_FREE: dict[Hashable, list] = {}


def take(key: Hashable, build: Callable[[], T]) -> T:
    """A free object given back under ``key``, or ``build()``'s if there is none."""
    free = _FREE.get(key)
    return free.pop() if free else build()


def give(key: Hashable, obj) -> None:
    """Hand ``obj`` back under ``key``; the caller must not use it any more."""
    _FREE.setdefault(key, []).append(obj)


def free_count(key: Hashable) -> int:
    """How many objects wait under ``key``."""
    return len(_FREE.get(key, ()))
