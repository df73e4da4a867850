"""taigym.sim: the liquid backend (Taichi kernels, rigid bodies as SDFs, containers, diagnostics).

Knows nothing of Gymnasium. Importing it does not initialise Taichi: ``World2D.build()`` does,
with the arch chosen explicitly (CPU by default).
"""

from .geometry import SHAPES, Box, Container, container
from .world2d import World2D

__all__ = ["SHAPES", "Box", "Container", "World2D", "container"]
