"""Reduced and learned models shared by planners and agents (no Gymnasium, no planners).

* :mod:`.outflow_tables` - Pan & Manocha 2016's per-container lookup tables over (lean angle, volume).
* :mod:`.simplified` - Pan & Manocha 2016's simplified liquid dynamics: volume V, outflow speed u, and the
  outflow parabola, with coefficients identified from the particle simulator (:mod:`.sysid`).
* :mod:`.liquid_net` - Pan & Manocha 2017's liquid-parameter network (4 x 32 ReLU MLP: outflow parabola,
  flux, mean-trajectory prior), trained on the CMA-ES dataset (torch, CPU).
"""
