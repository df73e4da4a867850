"""Deprecated: ``python -m taigym.apps.demos`` is now ``python -m taigym.apps.datasets`` (a Hydra
app for every env: ``env=<env> agent=expert episodes=N``). Kept so that old commands say where to
go instead of failing obscurely; not to be confused with ``taigym.apps.demo``, the main job."""

import sys

if __name__ == "__main__":
    sys.exit("taigym.apps.demos was renamed: use python -m taigym.apps.datasets env=<env> agent=expert "
             "episodes=<n> (Hydra overrides; see its --help)")
