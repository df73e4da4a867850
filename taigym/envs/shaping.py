"""Potential-based reward shaping (Ng, Harada & Russell 1999), the ``"dense"`` reward modes'
step shared by the envs that have one (Transport-v0, Transport3D-v0, Pour3D-v0, MultiContact)."""

from __future__ import annotations

from collections.abc import Callable


def shaping_terms(phi: dict[str, float], potentials: Callable[[], dict[str, float]], gamma: float,
                  done: bool) -> tuple[dict[str, float], dict[str, float]]:
    """The step's shaping terms ``gamma Phi(s') - Phi(s)`` per potential, and the potentials of
    the state after the step: ``potentials()``, or 0 on the step that ends an episode, so that
    the ``gamma``-discounted sum of the terms over an episode is ``-Phi(s_0)`` whatever the agent
    does. ``phi``: the potentials of the state before the step."""
    new = dict.fromkeys(phi, 0.0) if done else potentials()
    return {name: gamma * value - phi[name] for name, value in new.items()}, new


__all__ = ["shaping_terms"]
