"""taigym.training: how learned agents are trained (BC, DAgger, rh's network, Stable-Baselines3),
from the agents' parts; ``vec_env`` adapts taigym's batched vector envs to SB3's ``VecEnv``."""
