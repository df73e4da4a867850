"""taigym.agents: everything that acts in an env, behind one protocol (``reset``, ``act``).

``make(name, env, **cfg)`` builds an agent by name. Available now: ``random``, ``scripted``, ``sqp``
(seed 000's planner), ``bc``, ``dagger`` (torch MLPs; trained by ``taigym.apps.train``), ``ppo``,
``sac`` (Stable-Baselines3), ``sfrrt`` (seed 002's planner, Transport-v0), ``cmaes`` (seed 001's
CMA-ES pour search), ``rh`` (seed 001's receding-horizon planner; trained by
``taigym.apps.train agent=rh``), ``stance`` (seed 003's multi-contact planner + QP controller, for
``taigym/MultiContact-v1``).
"""

from __future__ import annotations

import importlib

from .base import Agent, evaluate, metrics_table, run_episode, summarise

_REGISTRY = {
    "random": "taigym.agents.random:RandomAgent",
    "scripted": "taigym.agents.scripted:ScriptedAgent",
    "sqp": "taigym.agents.sqp:make_agent",
    "bc": "taigym.agents.bc:BCAgent",
    "dagger": "taigym.agents.dagger:DAggerAgent",
    "ppo": "taigym.agents.ppo:PPOAgent",
    "sac": "taigym.agents.sac:SACAgent",
    "sfrrt": "taigym.agents.sfrrt:make_agent",
    "carry": "taigym.agents.carry:CarryAgent",
    "cmaes": "taigym.agents.cmaes:CMAESAgent",
    "rh": "taigym.agents.rh:RHAgent",
    "stance": "taigym.agents.stance:StanceAgent",
}


def register(name: str, target: str) -> None:
    """Register an agent class given as ``"module:Class"``."""
    _REGISTRY[name] = target


def available() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def make(name: str, env, **cfg) -> Agent:
    """Build the agent ``name`` for ``env`` with configuration ``cfg``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(available())}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)(env, **cfg)


__all__ = ["Agent", "available", "evaluate", "make", "metrics_table", "register", "run_episode",
           "summarise"]
