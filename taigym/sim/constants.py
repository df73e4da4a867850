"""Constants shared by the Taichi solver (``flip2d``), its NumPy reference and ``World2D``.
Kept free of Taichi so that the reference and the facade import no Taichi."""

# Columns of the per-scene diagnostics row the solvers write at the end of each advance.
# D_TARGET_SCORE: the target opening's score of the last advance (World2D.set_target_opening).
(D_UNSTABLE, D_MAX_CFL, D_SUBSTEPS, D_PCG_ITERS, D_IN_FLIGHT, D_SPILLED, D_AREA, D_TIME,
 D_TARGET_SCORE) = range(9)
N_DIAG = 9

MAX_PROBE_COLUMNS = 64    # columns of the liquid-height probe (World2D.set_height_probe)

# Algorithm limits both solvers must agree on (dimensionless unless stated).
ADVECTION_CFL = 0.9       # cells a particle may travel between two pushes out of solids
BLOWUP_SPEED = 50.0       # m/s: no pour or carry comes near this; beyond it the step has blown up
MAX_SUBSTEPS = 400        # per control interval; more means the CFL limit collapsed
VISCOSITY_SKIP = 1e-3     # viscosity pass only if nu * dt > VISCOSITY_SKIP * dx^2 (below it the
                          # scheme's own numerical viscosity dominates)
SURFACE_FRACTION_MIN = 0.05  # ghost-fluid free surface: nearest a surface may lie to a liquid cell's
                             # centre, as a fraction of the way to its air neighbour's (caps the
                             # ghost coefficient w / theta at 20 w)
VISCOSITY_WALL_MIN = 0.01    # no-slip walls in the implicit viscosity: nearest a wall may lie to a face's
                             # centre, as a fraction of the spacing to its neighbour

# Shared physical and control constants: defined here once, imported everywhere else.
GRAVITY = 9.81            # m/s^2, magnitude (the liquid worlds, 2D and 3D, have y up)
DENSITY = 1000.0          # kg/m^3, the worlds' default liquid density (water)
CONTROL_DT = 0.05         # s: the envs' default control step (DESIGN.md §2)
TORQUE_CONTROL_DT = 1.0 / 60.0   # s: MultiContact-v1's default control step, the coarsest at which the
                                 # stance expert's QP torque control holds the humanoid (see its env)
