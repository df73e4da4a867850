"""OSQP 1.x prints a line from C on every polished solve with no active constraint, whatever
``verbose`` says (osqp/osqp#785); the planners' solves must leave the console alone."""

import numpy as np

from taigym.planners.stance_statics import solve_qp


def test_solve_qp_prints_nothing_and_keeps_surrounding_output(capfd):
    # min 1/2 |x|^2 + (1, 1).x within a box it never touches: optimum (-1, -1), no active set
    print("before", flush=True)
    x = solve_qp(np.eye(2), np.ones(2), np.eye(2), np.full(2, -10.0), np.full(2, 10.0))
    print("after", flush=True)
    out = capfd.readouterr().out
    np.testing.assert_allclose(x, [-1.0, -1.0], atol=1e-6)
    assert out == "before\nafter\n"
