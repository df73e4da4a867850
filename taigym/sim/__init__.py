"""taigym.sim: the liquid backend (Taichi kernels, rigid bodies as SDFs, containers, diagnostics).

Knows nothing of Gymnasium. Importing it does not initialise Taichi: ``World2D.build()`` or
``World3D.build()`` does, with the arch chosen explicitly (CPU by default).
"""

from .geometry import SHAPES, Box, Container, container
from .geometry3d import Box3, Container3, container3d
from .world2d import World2D
from .world3d import World3D

__all__ = ["SHAPES", "Box", "Box3", "Container", "Container3", "World2D", "World3D", "container",
           "container3d"]
