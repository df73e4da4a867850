"""taigym.agents: everything that acts in an env, behind one protocol (``reset``, ``act``).

``make(name, env, **cfg)`` builds an agent by name. Experts: ``sqp`` (Pan & Manocha 2016's
planner; Pour-v0 and, in joint space, Pour3D-v0), ``cmaes`` (Pan & Manocha 2017's CMA-ES pour
search, Pour-v0), ``sfrrt`` (the SFRRT* paper's (2024) planner; Transport-v0 and
Transport3D-v0), ``carry`` (Transport3D-v0's straight-line carrier), ``stance`` (Bouyarmane &
Kheddar's multi-contact planner with a QP controller, MultiContact-v1). Learned: ``bc``,
``dagger`` (torch MLPs), ``rh`` (Pan & Manocha 2017's receding-horizon planner over a learned
liquid model, Pour-v0), ``ppo``, ``sac`` (Stable-Baselines3); they are trained by
:mod:`taigym.training` (``python -m taigym.apps.train``). Baselines: ``scripted`` (Pour-v0),
``random`` (any env).

An agent name maps to one class, or to one class per env family (``sqp`` builds
:class:`~taigym.agents.sqp.SQPAgent` on Pour-v0 and :class:`~taigym.agents.sqp3d.SQP3DAgent`
on Pour3D-v0): :func:`agent_class`.
"""

from __future__ import annotations

import importlib

from .base import Agent, evaluate, planning, run_episode
from .metrics import episode_metrics, summarise

#: name -> "module:Class", or {env family: "module:Class"}
_REGISTRY: dict[str, str | dict[str, str]] = {
    "random": "taigym.agents.random:RandomAgent",
    "scripted": "taigym.agents.scripted:ScriptedAgent",
    "sqp": {"pour": "taigym.agents.sqp:SQPAgent", "pour3d": "taigym.agents.sqp3d:SQP3DAgent"},
    "bc": "taigym.agents.bc:BCAgent",
    "dagger": "taigym.agents.dagger:DAggerAgent",
    "ppo": "taigym.agents.ppo:PPOAgent",
    "sac": "taigym.agents.sac:SACAgent",
    "sfrrt": {"transport": "taigym.agents.sfrrt:SFRRTAgent", "transport3d": "taigym.agents.sfrrt3d:SFRRT3DAgent"},
    "carry": "taigym.agents.carry:CarryAgent",
    "cmaes": "taigym.agents.cmaes:CMAESAgent",
    "rh": "taigym.agents.rh:RHAgent",
    "stance": "taigym.agents.stance:StanceAgent",
}


def register(name: str, target: str, family: str | None = None) -> None:
    """Register an agent class given as ``"module:Class"`` (for one env ``family`` only, if
    given: ``make(name, env)`` then picks the class by the env's family)."""
    if family is None:
        _REGISTRY[name] = target
        return
    entry = _REGISTRY.get(name)
    _REGISTRY[name] = {**(entry if isinstance(entry, dict) else {}), family: target}


def available() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def agent_class(name: str, env=None, family: str | None = None) -> type:
    """The class ``make(name, env)`` builds (per-family agents need ``env`` or ``family``)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(available())}")
    target = _REGISTRY[name]
    if isinstance(target, dict):
        if family is None:
            if env is None:
                raise ValueError(f"agent {name!r} has one class per env family ({', '.join(target)}): give the env")
            from taigym.envs import family_of

            family = family_of(env)
        if family not in target:
            raise ValueError(f"the {name} agent acts in {', '.join(target)} envs, not {family}")
        target = target[family]
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def make(name: str, env, **cfg) -> Agent:
    """Build the agent ``name`` for ``env`` with configuration ``cfg``."""
    return agent_class(name, env)(env, **cfg)


__all__ = ["Agent", "agent_class", "available", "episode_metrics", "evaluate", "make", "planning", "register",
           "run_episode", "summarise"]
