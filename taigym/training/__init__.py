"""taigym.training: how the learned agents are trained (DESIGN.md §1: ``training`` sits between
the agents, which only act, and the apps).

* :mod:`~taigym.training.bc`, :mod:`~taigym.training.dagger`: behaviour cloning and DAgger of
  an env's expert into the MLP policy of :mod:`taigym.agents.policy`
  (:mod:`~taigym.training.fit`: the supervised fit; :mod:`~taigym.training.common`: expert
  demonstrations, the tasks learned from and validated on);
* :mod:`~taigym.training.rh`: the liquid-parameter network of ``rh`` from the CMA-ES dataset;
* :mod:`~taigym.training.sb3`: Stable-Baselines3's ``ppo`` and ``sac``;
* :mod:`~taigym.training.vec_env`: SB3's ``VecEnv`` over taigym's batched vector envs
  (``BatchedVecEnv``), so SB3 trains on one batched engine;
* :mod:`~taigym.training.loggers`: the experiment loggers (console, W&B) the trainers and the
  apps log to.

Every trainer has the signature ``train(make_env, cfg, run_dir, logger, expert=None) -> agent``:
it checkpoints under ``run_dir`` (atomically) and resumes from there when called again.
"""
