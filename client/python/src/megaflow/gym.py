"""Gym-style environments over sandboxes, for agent loops and RL frameworks
that expect ``reset()`` / ``step(action)`` (the Gymnasium API's
conventions, without depending on gymnasium)::

    import megaflow, megaflow.gym

    def reward(env, action, result):
        return 1.0 if result.ok else 0.0

    with megaflow.Client(heads) as c, \\
         megaflow.gym.SandboxEnv(c, image="python:3.12-slim", files={"/work/task.txt": "fix the bug"},
                                 setup=["pip --version"], reward=reward, max_steps=20) as env:
        obs, info = env.reset(seed=0)
        while True:
            obs, r, terminated, truncated, info = env.step(policy(obs))   # a shell command
            if terminated or truncated:
                break

An action is a command: a string (run by ``sh -c``) or an argv list. The
observation is its output as text (stdout then stderr); ``observe=`` maps
the :class:`~megaflow.ExecResult` to another observation. ``reward=`` and
``terminate=`` score a step; ``max_steps`` truncates the episode.
:class:`AsyncSandboxEnv` is the same over :mod:`megaflow.aio` (its callbacks
may be coroutine functions).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import FailedPrecondition, InvalidArgument, SandboxEnded
from .sandbox import ExecResult, Seconds

__all__ = ["SandboxEnv", "AsyncSandboxEnv", "Action", "StepResult", "default_observation"]

Action = Union[str, Sequence[str]]
"""A command: a string run by ``sh -c``, or an argv list."""

StepResult = Tuple[Any, float, bool, bool, Dict[str, Any]]
"""(observation, reward, terminated, truncated, info), as Gymnasium's ``step``."""

MAX_STEPS_LIMIT = 1_000_000


def default_observation(result: ExecResult) -> str:
    """An exec's output as the observation: stdout then stderr, as text."""
    return result.text + result.stderr_text


class _EnvBase:
    """The settings and bookkeeping both environments share (no I/O)."""

    metadata: Dict[str, Any] = {"render_modes": []}
    render_mode: Optional[str] = None
    action_space: Any = None
    """Commands as text; None, as gymnasium's spaces are not a dependency
    (set it to a ``gymnasium.spaces.Text`` yourself if a wrapper needs one)."""
    observation_space: Any = None
    """Output as text; None for the same reason as :attr:`action_space`."""

    def __init__(self, client: Any, image: str, *, sandbox: Optional[Mapping[str, Any]] = None,
                 files: Optional[Mapping[str, Union[str, bytes]]] = None, setup: Sequence[Action] = (),
                 reset_command: Optional[Action] = None, observe: Callable[[ExecResult], Any] = default_observation,
                 reward: Optional[Callable[..., Any]] = None, terminate: Optional[Callable[..., Any]] = None,
                 max_steps: Optional[int] = None, step_timeout: Optional[Seconds] = None) -> None:
        if not isinstance(image, str) or not image.strip():
            raise InvalidArgument("megaflow.gym: image is empty; name the sandbox's image, e.g. python:3.12-slim")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                      or not 1 <= max_steps <= MAX_STEPS_LIMIT):
            raise InvalidArgument(f"megaflow.gym: max_steps {max_steps!r} is out of range: 1 to {MAX_STEPS_LIMIT}, "
                                  f"or None for no limit")
        for name, fn in (("observe", observe), ("reward", reward), ("terminate", terminate)):
            if fn is not None and not callable(fn):
                raise InvalidArgument(f"megaflow.gym: {name} must be a function, not {type(fn).__name__}")
        kw = dict(sandbox or {})
        if "image" in kw:
            raise InvalidArgument("megaflow.gym: give the image as image=, not in sandbox=")
        self.client = client
        self.image = image
        self._sandbox_kw = kw
        self._files = dict(files or {})
        self._setup = list(setup)
        self._reset_command = reset_command
        self._observe = observe
        self._reward = reward
        self._terminate = terminate
        self.max_steps = max_steps
        self._step_timeout = step_timeout
        self.sandbox: Any = None
        """The current episode's sandbox (None before :meth:`reset`)."""
        self.steps = 0
        """Steps taken in the current episode."""
        self._done = True
        self._seed: Optional[int] = None

    def _setup_env(self) -> Optional[Dict[str, str]]:
        return None if self._seed is None else {"MEGAFLOW_SEED": str(self._seed)}

    def _check_seed(self, seed: Optional[int]) -> None:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidArgument(f"megaflow.gym: seed {seed!r} is not an int")
        if seed is not None:
            self._seed = seed

    def _begin_step(self, action: Action) -> None:
        if self.sandbox is None:
            raise FailedPrecondition("megaflow.gym: step before reset(): call reset() first")
        if self._done:
            raise FailedPrecondition(f"megaflow.gym: the episode in {self.sandbox.id} is over (terminated or "
                                     f"truncated): call reset() for a new one")
        if isinstance(action, (bytes, bytearray)) or not isinstance(action, (str, Sequence)):
            raise InvalidArgument(f"megaflow.gym: action {action!r} is not a command: give a string (run by "
                                  f"sh -c) or an argv list")

    def _info(self, result: Optional[ExecResult]) -> Dict[str, Any]:
        info: Dict[str, Any] = {"sandbox_id": self.sandbox.id, "step": self.steps}
        if result is not None:
            info.update(exit_code=result.exit_code, timed_out=result.timed_out, output_truncated=result.truncated)
        return info

    def _ended(self, e: SandboxEnded) -> StepResult:
        """A step whose sandbox ended under it: truncated, the reason in info."""
        self._done = True
        info = self._info(None)
        info["error"] = str(e)
        return "", 0.0, False, True, info

    def _truncated(self) -> bool:
        return self.max_steps is not None and self.steps >= self.max_steps


class SandboxEnv(_EnvBase):
    """A Gymnasium-style environment whose state is a sandbox.

    Args:
        client: a :class:`megaflow.Client`.
        image: the sandbox's image.
        sandbox: other keyword arguments of :meth:`Client.sandbox`
            (``cpu_millis``, ``memory``, ``env``, ``working_dir``,
            ``lifetime``, ``idle_timeout``...).
        files: path -> content written into each new episode's sandbox.
        setup: commands run (in order) after the files are written; each
            must exit 0. Their output is the first observation. With a
            ``seed``, each sees it as ``$MEGAFLOW_SEED``.
        reset_command: None: every :meth:`reset` closes the sandbox and
            creates a fresh one; a command: the first reset creates the
            sandbox, later ones run this command in it (it must exit 0)
            instead (faster, for tasks that can clean up after themselves).
        observe: ExecResult -> observation (default: stdout then stderr).
        reward: ``reward(env, action, result) -> float`` (default 0.0).
        terminate: ``terminate(env, action, result) -> bool``: the task is
            done (default: never; the episode then ends by truncation).
        max_steps: steps per episode, after which ``truncated`` is True;
            None: no limit.
        step_timeout: seconds each action may run (None: the server's
            default, 10 minutes); one that times out is a result
            (``info["timed_out"]``), not an error.

    Raises:
        InvalidArgument: a bad argument (no RPC made).
    """

    def reset(self, *, seed: Optional[int] = None, options: Optional[Mapping[str, Any]] = None
              ) -> Tuple[Any, Dict[str, Any]]:
        """Start an episode: a fresh sandbox (or ``reset_command`` in the
        current one), the files written, the setup run.

        Args:
            seed: passed to the setup commands as ``$MEGAFLOW_SEED`` (kept
                for later resets when given once).
            options: unused; accepted for the Gymnasium signature.

        Returns:
            (observation, info): the setup's output, and ``{"sandbox_id",
            "step": 0}``.

        Raises:
            MegaflowError: the sandbox could not be created (e.g.
                :class:`SandboxFailed`), or a setup command failed
                (:class:`FailedPrecondition` with its output).
        """
        self._check_seed(seed)
        self._done = True
        self.steps = 0
        if self.sandbox is not None and self._reset_command is None:
            old, self.sandbox = self.sandbox, None
            old.close()
        if self.sandbox is None:
            self.sandbox = self.client.sandbox(self.image, **self._sandbox_kw)
            cmds: List[Action] = list(self._setup)
        else:
            assert self._reset_command is not None
            cmds = [self._reset_command] + list(self._setup)
        for path, data in self._files.items():
            self.sandbox.write_file(path, data)
        outs = []
        for cmd in cmds:
            r = self.sandbox.exec(cmd, env=self._setup_env(), timeout=self._step_timeout)
            if not r.ok:
                raise FailedPrecondition(f"megaflow.gym: setup command {cmd!r} in {self.sandbox.id} exited "
                                         f"{r.exit_code}{' (timed out)' if r.timed_out else ''}: "
                                         f"{(r.text + r.stderr_text)[-2000:]}")
            outs.append(r)
        self._done = False
        obs = self._observe(outs[-1]) if outs else ""
        return obs, self._info(None)

    def step(self, action: Action) -> StepResult:
        """Run an action in the sandbox.

        Args:
            action: a shell command string, or an argv list.

        Returns:
            (observation, reward, terminated, truncated, info); info has
            ``exit_code``, ``timed_out``, ``output_truncated``, ``step``,
            ``sandbox_id``, and ``error`` when the sandbox ended under the
            step (then truncated is True).

        Raises:
            FailedPrecondition: no episode (reset() first, or it is over).
            InvalidArgument: not a command.
            Unavailable: the exec's head failed after sending: it may or
                may not have run (see :meth:`megaflow.Sandbox.exec`).
        """
        self._begin_step(action)
        try:
            result = self.sandbox.exec(action, timeout=self._step_timeout)
        except SandboxEnded as e:
            self.steps += 1
            return self._ended(e)
        self.steps += 1
        reward = float(self._reward(self, action, result)) if self._reward else 0.0
        terminated = bool(self._terminate(self, action, result)) if self._terminate else False
        truncated = not terminated and self._truncated()
        self._done = terminated or truncated
        return self._observe(result), reward, terminated, truncated, self._info(result)

    def close(self) -> None:
        """Close the sandbox (idempotent)."""
        if self.sandbox is not None:
            sb, self.sandbox = self.sandbox, None
            self._done = True
            sb.close()

    def __enter__(self) -> "SandboxEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncSandboxEnv(_EnvBase):
    """:class:`SandboxEnv` over :mod:`megaflow.aio`: ``await env.reset()``,
    ``await env.step(action)``, ``await env.close()``, ``async with``.
    ``reward``, ``terminate`` and ``observe`` may be coroutine functions
    (e.g. a reward that runs a grader in ``env.sandbox``). Many of them step
    at once from one event loop (``asyncio.gather``).

    Args:
        client: a :class:`megaflow.aio.Client`; the rest as
            :class:`SandboxEnv`.
    """

    async def reset(self, *, seed: Optional[int] = None, options: Optional[Mapping[str, Any]] = None
                    ) -> Tuple[Any, Dict[str, Any]]:
        """As :meth:`SandboxEnv.reset`."""
        self._check_seed(seed)
        self._done = True
        self.steps = 0
        if self.sandbox is not None and self._reset_command is None:
            old, self.sandbox = self.sandbox, None
            await old.close()
        if self.sandbox is None:
            self.sandbox = await self.client.sandbox(self.image, **self._sandbox_kw)
            cmds: List[Action] = list(self._setup)
        else:
            assert self._reset_command is not None
            cmds = [self._reset_command] + list(self._setup)
        for path, data in self._files.items():
            await self.sandbox.write_file(path, data)
        outs = []
        for cmd in cmds:
            r = await self.sandbox.exec(cmd, env=self._setup_env(), timeout=self._step_timeout)
            if not r.ok:
                raise FailedPrecondition(f"megaflow.gym: setup command {cmd!r} in {self.sandbox.id} exited "
                                         f"{r.exit_code}{' (timed out)' if r.timed_out else ''}: "
                                         f"{(r.text + r.stderr_text)[-2000:]}")
            outs.append(r)
        self._done = False
        obs = await _maybe(self._observe(outs[-1])) if outs else ""
        return obs, self._info(None)

    async def step(self, action: Action) -> StepResult:
        """As :meth:`SandboxEnv.step`."""
        self._begin_step(action)
        try:
            result = await self.sandbox.exec(action, timeout=self._step_timeout)
        except SandboxEnded as e:
            self.steps += 1
            return self._ended(e)
        self.steps += 1
        reward = float(await _maybe(self._reward(self, action, result))) if self._reward else 0.0
        terminated = bool(await _maybe(self._terminate(self, action, result))) if self._terminate else False
        truncated = not terminated and self._truncated()
        self._done = terminated or truncated
        return await _maybe(self._observe(result)), reward, terminated, truncated, self._info(result)

    async def close(self) -> None:
        """Close the sandbox (idempotent)."""
        if self.sandbox is not None:
            sb, self.sandbox = self.sandbox, None
            self._done = True
            await sb.close()

    async def __aenter__(self) -> "AsyncSandboxEnv":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def _maybe(v: Any) -> Any:
    return await v if inspect.isawaitable(v) else v
