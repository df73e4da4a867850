"""OSQP solves without OSQP 1.x's unconditional console line.

With ``polishing=True``, OSQP 1.x prints "Polishing not needed - no active set detected at
optimal point" on every solve whose optimum has no active constraint, even with
``verbose=False`` (upstream osqp/osqp#785, open). The stance IK and the pouring SQP solve
many QPs per plan, and a user's console filled with that line. The Python wheel
prints through ``sys.stdout``; :func:`solve` points it elsewhere for the solve only. Output
another thread prints during the solve (about 0.1 ms) is dropped too: the planners run
single-threaded.
"""

from __future__ import annotations

import contextlib
import io


def solve(solver):
    """``solver.solve(raise_error=False)`` with what it prints discarded."""
    with contextlib.redirect_stdout(io.StringIO()):
        return solver.solve(raise_error=False)
