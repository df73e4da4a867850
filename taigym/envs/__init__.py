"""taigym.envs: Gymnasium environments, task samplers and splits, rendering, registration.

Importing this package registers the environment ids (``taigym/Pour-v0``, ...) with Gymnasium;
it does not import or initialise Taichi (the simulator is built on the first ``reset``).
"""

from __future__ import annotations

import gymnasium as gym

FAMILIES = ("pour", "pour3d", "transport", "transport3d", "multicontact", "multicontact_soft")


def tasks(family: str, split: str = "train") -> tuple:
    """The fixed, seeded task split of an env family: ``split="train"`` (1000 tasks) or
    ``"eval"`` (100 tasks), disjoint and identical on every machine; Pour-v0 also has ``"val"``
    (400 tasks, for model selection)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}; got {family!r}")
    if family == "transport":
        from .transport_tasks import transport_tasks

        return transport_tasks(split)
    if family == "transport3d":
        from .transport3d_tasks import transport3d_tasks

        return transport3d_tasks(split)
    if family == "pour3d":
        from .pour3d_tasks import pour3d_tasks

        return pour3d_tasks(split)
    if family == "multicontact":
        from .multicontact_tasks import multicontact_tasks

        return multicontact_tasks(split)
    if family == "multicontact_soft":
        from .multicontact_tasks import soft_tasks

        return soft_tasks(split)
    from .pour_tasks import pour_tasks

    return pour_tasks(split)


def family_of(env) -> str:
    """The task family of an env (``taigym/Pour3D-v0`` -> ``pour3d``), from its spec's id (any
    fidelity of Pour-v0 is ``pour``), else from its class (``Pour3DEnv`` -> ``pour3d``)."""
    spec = getattr(env, "spec", None) or getattr(env.unwrapped, "spec", None)
    if spec is not None and spec.id.startswith("taigym/"):
        name = spec.id.split("/")[-1].split("-v")[0]
    else:
        name = type(env.unwrapped).__name__.removesuffix("Env")
    family = name.lower()
    if family not in FAMILIES:
        raise ValueError(f"{spec.id if spec is not None else type(env.unwrapped).__name__} is not a taigym env "
                         f"(families: {', '.join(FAMILIES)})")
    return family


def _register() -> None:
    if "taigym/Pour-v0" not in gym.registry:
        gym.register(id="taigym/Pour-v0", entry_point="taigym.envs.pour:PourEnv",
                     vector_entry_point="taigym.envs.pour_vector:PourVectorEnv")
    if "taigym/Transport-v0" not in gym.registry:
        gym.register(id="taigym/Transport-v0", entry_point="taigym.envs.transport:TransportEnv")
    if "taigym/Transport3D-v0" not in gym.registry:
        gym.register(id="taigym/Transport3D-v0", entry_point="taigym.envs.transport3d:Transport3DEnv")
    if "taigym/Pour3D-v0" not in gym.registry:
        gym.register(id="taigym/Pour3D-v0", entry_point="taigym.envs.pour3d:Pour3DEnv")
    if "taigym/MultiContact-v0" not in gym.registry:
        # v0's defaults (PD position targets every 0.05 s), kept so that v0 results reproduce
        gym.register(id="taigym/MultiContact-v0", entry_point="taigym.envs.multicontact:MultiContactEnv",
                     kwargs={"control": "pd", "control_dt": 0.05})
    if "taigym/MultiContact-v1" not in gym.registry:
        gym.register(id="taigym/MultiContact-v1", entry_point="taigym.envs.multicontact:MultiContactEnv")


_register()

__all__ = ["FAMILIES", "family_of", "tasks"]
