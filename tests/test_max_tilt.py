"""The SFRRT* paper's maximum tilt (taigym.models.max_tilt) against the polygon geometry and the simulator."""

import math

import numpy as np
import pytest

from taigym import sim
from taigym.models.max_tilt import max_tilt, max_tilt_3d, max_tilt_paper, tilt_case

SHAPES = [(0.10, 0.05), (0.08, 0.08), (0.07, 0.10), (0.10, 0.02)]   # top, bottom widths (m)
FILLS = [0.1, 0.3, 0.45, 0.6, 0.75, 0.9, 0.99]


@pytest.mark.parametrize("top,bottom", SHAPES)
def test_formula_matches_the_polygon_max_tilt(top, bottom):
    """Both cases of Eqs. 1-2 equal the tilt at which the cross-section polygon, rotated, holds
    the liquid area exactly up to its lower lip (geometry's bisection)."""
    cup = sim.container("frustum", width=top, height=0.1, bottom_width=bottom)
    cases = set()
    for f in FILLS:
        got = max_tilt(bottom / 2, top / 2, 0.1, f * 0.1)
        assert got == pytest.approx(cup.max_tilt_angle(f), abs=1e-7)
        cases.add(tilt_case(bottom / 2, top / 2, 0.1, f * 0.1))
        if top != bottom:  # the printed Eq. 1 divides by r_u - r_b
            assert max_tilt_paper(bottom / 2, top / 2, 0.1, f * 0.1) == pytest.approx(got, abs=1e-9)
    assert cases == {1, 2}, "the fills must cover both of the paper's cases"


def test_max_tilt_properties():
    # more liquid tilts less; a full container cannot tilt; a rectangle: tan = 2 (h_c - h_w) / w
    angles = [max_tilt(0.03, 0.04, 0.1, f * 0.1) for f in FILLS]
    assert np.all(np.diff(angles) < 0)
    assert max_tilt(0.03, 0.04, 0.1, 0.1) == pytest.approx(0.0, abs=1e-12)
    assert max_tilt(0.04, 0.04, 0.1, 0.07) == pytest.approx(math.atan(2 * 0.03 / 0.08))
    # 3D: in case I the tilted plane halves symmetrically, so 2D and 3D agree; in case II a cone
    # holds less near the lower lip than the trapezoid, so it tilts less
    assert max_tilt_3d(0.03, 0.04, 0.1, 0.07) == pytest.approx(max_tilt(0.03, 0.04, 0.1, 0.07), abs=1e-6)
    assert max_tilt_3d(0.03, 0.04, 0.1, 0.02) < max_tilt(0.03, 0.04, 0.1, 0.02)


def test_bad_inputs():
    with pytest.raises(ValueError, match="fill_height"):
        max_tilt(0.03, 0.04, 0.1, 0.11)
    with pytest.raises(ValueError, match="top_radius"):
        max_tilt(0.03, -0.04, 0.1, 0.05)


@pytest.mark.slow
def test_formula_agrees_with_the_simulator_within_3_deg():
    """scripts/max_tilt_check.py: quasi-static spill angle of the FLIP solver over fills
    0.3-0.9 and three frustum shapes (flaring, straight, leaning in)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "scripts" / "max_tilt_check.py"
    spec = importlib.util.spec_from_file_location("max_tilt_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.run()
    errs = [r["error_deg"] for r in rows]
    assert not any(math.isnan(e) for e in errs)
    assert max(abs(e) for e in errs) < 3.0, [(r["shape"], r["fill"], round(r["error_deg"], 2)) for r in rows]
