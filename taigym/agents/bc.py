"""``bc``: the behaviour-cloned MLP policy (:class:`~taigym.agents.policy.PolicyAgent`).

``make("bc", env, checkpoint=path)`` (or ``BCAgent.load(path, env)``) loads a policy trained by
:mod:`taigym.training.bc` (``python -m taigym.apps.train agent=bc env=<env>``).
"""

from __future__ import annotations

from .policy import PolicyAgent


class BCAgent(PolicyAgent):
    """The behaviour-cloned policy (``make("bc", env, checkpoint=path)`` loads one)."""

    name = "bc"


__all__ = ["BCAgent"]
