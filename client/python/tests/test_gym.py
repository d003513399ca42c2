"""megaflow.gym against fake heads: reset creates (or resets) the sandbox,
writes the files and runs the setup; step returns Gymnasium's 5-tuple;
max_steps truncates; terminate ends; an ended sandbox truncates with the
reason; misuse is refused with what to do. The same scenario runs on
SandboxEnv and AsyncSandboxEnv."""

import asyncio

import grpc
import pytest

import megaflow
import megaflow.aio
import megaflow.gym
from fakehead import with_reason
from megaflow._proto import sandbox_pb2 as sbx
from test_sandbox import Box

FAST = dict(backoff=(0.01, 0.05), timeout=5)


def reward(env, action, result):
    return 1.0 if result.ok else -1.0


def terminate(env, action, result):
    return action == "submit"


def _env_kwargs():
    return dict(sandbox={"memory": "1Gi", "idle_timeout": 60}, files={"/work/task.txt": "fix it"},
                setup=["cat /work/task.txt"], reward=reward, terminate=terminate, max_steps=3, step_timeout=30)


class Sync:
    """Drives SandboxEnv; Async drives AsyncSandboxEnv the same way."""

    def __init__(self, addr):
        self.c = megaflow.Client([addr], **FAST)
        self.env = megaflow.gym.SandboxEnv(self.c, "busybox", **_env_kwargs())

    def __call__(self, method, *a, **kw):
        return getattr(self.env, method)(*a, **kw)

    def close(self):
        self.env.close()
        self.c.close()


class Async:
    def __init__(self, addr):
        self.loop = asyncio.new_event_loop()
        self.c = self.loop.run_until_complete(self._client(addr))
        self.env = megaflow.gym.AsyncSandboxEnv(self.c, "busybox", **_env_kwargs())

    @staticmethod
    async def _client(addr):
        return megaflow.aio.Client([addr], **FAST)

    def __call__(self, method, *a, **kw):
        return self.loop.run_until_complete(asyncio.wait_for(getattr(self.env, method)(*a, **kw), 20))

    def close(self):
        self.loop.run_until_complete(self.env.close())
        self.loop.run_until_complete(self.c.close())
        self.loop.close()


@pytest.fixture(params=[Sync, Async], ids=["sync", "aio"])
def driver(request):
    return request.param


def test_episode_reset_step_truncate_terminate(heads, driver):
    (h,) = heads(1)
    box = Box().install(h)
    box.exec_script = [("stdout", b"fix it"), ("exit", 0)]

    def create(req, ctx):  # every new sandbox starts READY
        box.state = sbx.SANDBOX_STATE_READY
        return Box.create(box, req, ctx)

    h.handlers["CreateSandbox"] = create
    d = driver(h.addr)
    try:
        with pytest.raises(megaflow.FailedPrecondition, match="reset"):
            d("step", "ls")
        obs, info = d("reset", seed=7)
        assert obs == "fix it" and info == {"sandbox_id": d.env.sandbox.id, "step": 0}
        first = d.env.sandbox.id
        create = h.calls["CreateSandbox"][0].spec
        assert (create.image, create.memory_bytes, create.idle_timeout_seconds) == ("busybox", 1 << 30, 60)
        w = h.calls["WriteFile"][0]
        assert (w.path, w.data) == ("/work/task.txt", b"fix it")
        setup = h.calls["Exec"][0]
        assert list(setup.argv) == ["sh", "-c", "cat /work/task.txt"] and dict(setup.env) == {"MEGAFLOW_SEED": "7"}

        box.exec_script = [("stdout", b"out\n"), ("stderr", b"err\n"), ("exit", 2)]
        obs, r, term, trunc, info = d("step", ["make", "test"])
        assert (obs, r, term, trunc) == ("out\nerr\n", -1.0, False, False)
        assert info == {"sandbox_id": first, "step": 1, "exit_code": 2, "timed_out": False, "output_truncated": False}
        assert list(h.calls["Exec"][1].argv) == ["make", "test"] and h.calls["Exec"][1].timeout_millis == 30000
        box.exec_script = [("exit", 0)]
        assert d("step", "true")[1:4] == (1.0, False, False)
        assert d("step", "true")[1:4] == (1.0, False, True)  # the third of max_steps=3: truncated
        with pytest.raises(megaflow.FailedPrecondition, match="over"):
            d("step", "true")

        # A new episode: a fresh sandbox, the old one closed.
        d("reset")
        assert d.env.sandbox.id != first and [c.id for c in h.calls["CloseSandbox"]] == [first]
        assert dict(h.calls["Exec"][-1].env) == {"MEGAFLOW_SEED": "7"}  # the seed is kept
        assert d("step", "submit")[1:4] == (1.0, True, False)  # terminate
        assert d.env.steps == 1
    finally:
        d.close()
    assert h.count("CloseSandbox") == 2


def test_reset_command_reuses_the_sandbox_and_failing_setup_raises(heads, driver):
    (h,) = heads(1)
    box = Box().install(h)
    box.exec_script = [("exit", 0)]
    d = driver(h.addr)
    d.env._reset_command = "rm -rf /work/*"
    try:
        d("reset")
        sid = d.env.sandbox.id
        d("reset")
        assert d.env.sandbox.id == sid and h.count("CreateSandbox") == 1 and h.count("CloseSandbox") == 0
        assert [list(e.argv)[-1] for e in h.calls["Exec"]] == ["cat /work/task.txt", "rm -rf /work/*",
                                                              "cat /work/task.txt"]
        box.exec_script = [("stderr", b"no such file"), ("exit", 1)]
        with pytest.raises(megaflow.FailedPrecondition, match="exited 1.*no such file"):
            d("reset")
        with pytest.raises(megaflow.FailedPrecondition):  # no episode after a failed reset
            d("step", "ls")
    finally:
        d.close()


def test_a_sandbox_that_ends_truncates_the_episode(heads, driver):
    (h,) = heads(1)
    box = Box().install(h)
    box.exec_script = [("exit", 0)]
    d = driver(h.addr)
    try:
        d("reset")
        box.exec_script = [("fail", with_reason(grpc.StatusCode.FAILED_PRECONDITION,
                                                "sandbox expired: idle for 60 s", "SANDBOX_EXPIRED"))]
        obs, r, term, trunc, info = d("step", "ls")
        assert (obs, r, term, trunc) == ("", 0.0, False, True)
        assert "idle for 60 s" in info["error"] and info["step"] == 1
    finally:
        d.close()


def test_bad_arguments_are_refused_before_any_rpc(heads):
    (h,) = heads(1)
    with megaflow.Client([h.addr], **FAST) as c:
        for kw in (dict(image=""), dict(image="x", max_steps=0), dict(image="x", max_steps=True),
                   dict(image="x", reward=3), dict(image="x", sandbox={"image": "y"})):
            with pytest.raises(megaflow.InvalidArgument):
                megaflow.gym.SandboxEnv(c, **kw)
        env = megaflow.gym.SandboxEnv(c, "busybox")
        with pytest.raises(megaflow.InvalidArgument):
            env.reset(seed="1")
    assert not h.calls


def test_async_envs_step_at_once_with_an_async_reward(heads):
    (h,) = heads(1)
    box = Box().install(h)
    box.exec_script = [("stdout", b"ok"), ("exit", 0)]

    async def graded(env, action, result):  # a reward that runs a grader in the sandbox
        g = await env.sandbox.exec("grade")
        return float(len(g.text))

    async def main():
        async with megaflow.aio.Client([h.addr], **FAST) as c:
            envs = [megaflow.gym.AsyncSandboxEnv(c, "busybox", reward=graded, max_steps=1) for _ in range(4)]
            await asyncio.gather(*[e.reset() for e in envs])
            steps = await asyncio.gather(*[e.step(f"echo {i}") for i, e in enumerate(envs)])
            await asyncio.gather(*[e.close() for e in envs])
            return steps, {e.sandbox for e in envs}

    steps, left = asyncio.run(asyncio.wait_for(main(), 20))
    assert [s[:4] for s in steps] == [("ok", 2.0, False, True)] * 4
    assert left == {None} and h.count("CreateSandbox") == h.count("CloseSandbox") == 4
