"""megaflow.env is megaflow.gym under the name the gym-style frameworks import."""

import megaflow.env
import megaflow.gym


def test_env_reexports_gym():
    for name in megaflow.gym.__all__:
        assert getattr(megaflow.env, name) is getattr(megaflow.gym, name), name
    assert megaflow.env.__all__ == megaflow.gym.__all__
    from megaflow.env import AsyncSandboxEnv, SandboxEnv
    assert (SandboxEnv, AsyncSandboxEnv) == (megaflow.gym.SandboxEnv, megaflow.gym.AsyncSandboxEnv)
