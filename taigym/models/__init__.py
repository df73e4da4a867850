"""Reduced and learned models shared by planners and agents (no Gymnasium, no planners).

* :mod:`.outflow_tables` - seed 000's per-container lookup tables over (lean angle, volume).
* :mod:`.simplified` - seed 000's simplified liquid dynamics: volume V, outflow speed u, and the
  outflow parabola, with coefficients identified from the particle simulator (:mod:`.sysid`).
* :mod:`.liquid_net` - seed 001's liquid-parameter network (4 x 32 ReLU MLP: outflow parabola,
  flux, mean-trajectory prior), trained on the CMA-ES dataset (torch, CPU).
"""
