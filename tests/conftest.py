import os

# Tests never touch the network, and compile the solver without Taichi's slow IR optimisations
# (same results, ~3 s per grid shape instead of ~25 s).
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
os.environ.setdefault("TAIGYM_FAST_COMPILE", "1")
