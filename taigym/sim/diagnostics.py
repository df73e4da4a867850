"""Columns of the per-scene diagnostics row the solvers write at the end of each advance
(shared by the Taichi solver, its NumPy reference and ``World2D``; no Taichi import here)."""

D_UNSTABLE, D_MAX_CFL, D_SUBSTEPS, D_PCG_ITERS, D_IN_FLIGHT, D_SPILLED, D_AREA, D_TIME = range(8)
N_DIAG = 8
