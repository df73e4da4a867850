"""``dagger``: the MLP policy trained by DAgger (:class:`~taigym.agents.policy.PolicyAgent`).

``make("dagger", env, checkpoint=path)`` (or ``DAggerAgent.load(path, env)``) loads a policy
trained by :mod:`taigym.training.dagger` (``python -m taigym.apps.train agent=dagger env=<env>``).
"""

from __future__ import annotations

from .policy import PolicyAgent


class DAggerAgent(PolicyAgent):
    """The DAgger policy (``make("dagger", env, checkpoint=path)`` loads one)."""

    name = "dagger"


__all__ = ["DAggerAgent"]
