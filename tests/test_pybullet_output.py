"""pybullet prints nothing of its own to stdout (fd 1) while the envs and their experts run: the
stance expert's first mass matrix of a robot used to print two ``b3Warning ... axis of motion
not a unit axis`` lines per oblique joint axis (16 lines an episode); whatever else the process
prints is kept, in order."""

import subprocess
import sys

import pytest

STANCE = """
import ctypes, gymnasium as gym, taigym, taigym.agents as agents
from taigym.envs.multicontact_tasks import MultiContactTask
ctypes.CDLL(None).printf(b"c-level before\\n")   # still in C's stdout buffer when pybullet runs
env = gym.make("taigym/MultiContact-v0", control="torque", control_dt=1 / 60)
obs, info = env.reset(seed=0, options={"task": MultiContactTask(family="step")})
agent = agents.make("stance", env)
agent.reset(seed=0)
print("python before", flush=True)
for _ in range(3):
    obs, *_, info = env.step(agent.act(obs, info))
print("python after")
env.close()
"""

ENVS = """
import numpy as np, gymnasium as gym, taigym
for env_id in ("taigym/MultiContact-v0", "taigym/Transport3D-v0", "taigym/Pour3D-v0"):
    env = gym.make(env_id)
    env.reset(seed=0)
    env.step(np.zeros(env.action_space.shape))
    env.close()
    print("done", env_id, flush=True)
"""


def run(script: str) -> str:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_stance_expert_prints_no_b3_warnings_and_keeps_other_output():
    out = run(STANCE)
    assert "b3Warning" not in out and "unit axis" not in out
    lines = [ln for ln in out.splitlines() if ln.startswith(("c-level", "python"))]
    assert lines == ["c-level before", "python before", "python after"]


@pytest.mark.integration
def test_making_resetting_and_stepping_the_pybullet_envs_prints_no_b3_warnings():
    out = run(ENVS)
    assert "b3Warning" not in out
    assert out.count("done") == 3
