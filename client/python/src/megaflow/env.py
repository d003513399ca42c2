"""``megaflow.env``: the gym-style environments under the name RL frameworks
look for (``megaflow.env.SandboxEnv``, ``megaflow.env.AsyncSandboxEnv``).

This module only re-exports :mod:`megaflow.gym`, which holds the one
implementation and its documentation; both import paths give the same
classes (``megaflow.env.SandboxEnv is megaflow.gym.SandboxEnv``).
``megaflow.env`` is the canonical name to import from::

    from megaflow.env import AsyncSandboxEnv

    async with megaflow.aio.Client(heads) as c, AsyncSandboxEnv(c, image="python:3.12-slim", max_steps=20) as env:
        obs, info = await env.reset(seed=0)
        obs, reward, terminated, truncated, info = await env.step("ls")
"""

from .gym import Action, AsyncSandboxEnv, SandboxEnv, StepResult, default_observation

__all__ = ["SandboxEnv", "AsyncSandboxEnv", "Action", "StepResult", "default_observation"]
