#!/usr/bin/python3
"""The demo's agent, replayed step by step in sandboxes from this process.

``megaflow demo`` runs its agent (cmd/megaflow-agent) inside each
rollout's task. Here the agent loop runs in the client instead: one
sandbox per SWE-Gym instance, N at once on one asyncio event loop
(:mod:`megaflow.aio` and :class:`megaflow.env.AsyncSandboxEnv`), each step
one exec::

    megaflow up --runtime docker &             # workers never pull: `make image` builds megaflow/busybox:test
    python3 examples/python/agent_loop.py --sandboxes 8

What is replayed from the demo:

* the episodes: the instances ``megaflow demo`` picks, each with the
  rollout profile the demo draws for it from the data with the same
  ``--seed`` (steps of the last attempt, failed attempts, finished or
  step limit; demo_data.py);
* the environment: the small repository the agent's ``setup`` lays out;
* the policy: the demo's mock model (examples/demo/model.go) picks each
  step's command from a hash of the conversation so far; this loop keeps
  the conversation as the agent does and applies the same rule in
  process, so no model server is needed (a step's output is stdout then
  stderr here, where the agent sees them interleaved);
* failures: an attempt the data makes fail breaks off half-way, as the
  agent's does, and the loop starts a fresh episode (a new sandbox) for
  the next attempt, as the cluster retries the rollout task;
* the reward: 1 when the episode finished within its step limit, else 0
  (the agent's ``eval``).

Not replayed: the per-step times of the data (the loop steps as fast as
the sandboxes answer) and the setup/eval tasks (the setup is files written
into the sandbox; the eval is the reward above). ``--max-steps`` caps the
steps of every episode (for quick runs; a capped episode keeps its
reward rule).

Prints one line per episode (instance, attempt, steps, end, reward) and a
summary (episodes, mean reward, execs, execs/s, exec p50/p99). Exit code
0 when every episode ran, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client" / "python" / "src"))

import megaflow  # noqa: E402
import megaflow.aio  # noqa: E402
from megaflow.env import AsyncSandboxEnv  # noqa: E402

import demo_data  # noqa: E402

WORK = "/work"


def fnv1a32(data: bytes, h: int = 2166136261) -> int:
    """FNV-1a, 32 bits (Go's hash/fnv New32a), continuing from h."""
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def model_tool(messages: List[Dict[str, str]]) -> str:
    """The command the demo's mock model answers for this conversation."""
    h = 2166136261
    for m in messages:
        h = fnv1a32(m["content"].encode(), h)
    return demo_data.TOOLS[(h + len(messages)) % len(demo_data.TOOLS)]


def repo_files(repo: str) -> Dict[str, str]:
    """The repository the agent's setup lays out (cmd/megaflow-agent)."""
    return {
        f"{WORK}/repo/README": f"repository {repo}\n",
        f"{WORK}/repo/core.py": "def apply(x):\n    # TODO: handle None\n    return x + 1\n",
        f"{WORK}/repo/util.py": "def helper(y):\n    return y * 2\n",
        f"{WORK}/repo/test_core.py": "from core import apply\n\ndef test_apply():\n    assert apply(1) == 2\n",
    }


async def rollout(c: megaflow.aio.Client, p: demo_data.Profile, args: argparse.Namespace,
                  exec_secs: List[float]) -> List[Dict[str, Any]]:
    """One instance's rollout: an episode per attempt; returns their records."""
    steps = len(p.step_millis) if args.max_steps is None else min(len(p.step_millis), args.max_steps)
    records = []
    for attempt in range(1, p.attempts + 1):
        fails = attempt < p.attempts
        # The episode ends at its last step: terminated with the reward when
        # the data's rollout finished, truncated (max_steps) when it hit the
        # step limit; an attempt that fails breaks off half-way.
        env = AsyncSandboxEnv(
            c, args.image, files=repo_files(p.instance.repo), max_steps=steps, step_timeout=30,
            sandbox=dict(cpu_millis=100 * p.instance.factor, memory=(64 << 20) * p.instance.factor,
                         working_dir=WORK, lifetime=600, idle_timeout=120),
            terminate=lambda env, a, r: p.finished and env.steps == steps,
            reward=lambda env, a, r: 1.0 if p.finished and env.steps == steps else 0.0)
        messages = [{"role": "system", "content": "You are a software engineering agent. Use execute_bash."},
                    {"role": "user", "content": f"Resolve the issue of {p.instance.id} in ./repo."}]
        total, end = 0.0, ""
        async with env:
            await env.reset(seed=args.seed)
            for i in range(steps):
                if fails and i == steps // 2:
                    end = f"environment broke at step {i + 1}"
                    break
                cmd = model_tool(messages)
                t0 = time.monotonic()
                obs, r, terminated, truncated, info = await env.step(cmd)
                exec_secs.append(time.monotonic() - t0)
                total += r
                if "error" in info:
                    raise RuntimeError(f"{p.instance.id}: sandbox {info['sandbox_id']} ended: {info['error']}")
                messages += [{"role": "assistant", "content": "execute_bash: " + cmd},
                             {"role": "user", "content": f"exit {info['exit_code']}: "
                                                         + obs.encode()[:200].decode(errors="replace")}]
                if len(messages) > 8:
                    messages = messages[:2] + messages[-6:]
                if terminated or truncated:
                    end = "finished" if terminated else "step-limit"
                    break
            sid = env.sandbox.id
        rec = dict(instance=p.instance.id, attempt=attempt, steps=env.steps, end=end, reward=total, sandbox=sid)
        print(f"{rec['instance']:<32} attempt {attempt}  {env.steps:>3} steps  reward {total:.1f}  {end}  ({sid})",
              flush=True)
        records.append(rec)
    return records


async def run(args: argparse.Namespace) -> int:
    data = demo_data.Data()
    profiles = [data.profile(i, args.seed, 30) for i in data.pick(args.sandboxes)]
    heads = [h.strip() for h in args.heads.split(",") if h.strip()]
    exec_secs: List[float] = []
    t0 = time.monotonic()
    async with megaflow.aio.Client(heads, tenant=args.tenant) as c:
        results = await asyncio.gather(*[rollout(c, p, args, exec_secs) for p in profiles], return_exceptions=True)
    wall = time.monotonic() - t0
    episodes = [r for rs in results if isinstance(rs, list) for r in rs]
    errors = [e for e in results if isinstance(e, BaseException)]
    for e in errors:
        print(f"agent_loop: a rollout failed: {e}", file=sys.stderr)
    last = [r for r in episodes if not r["end"].startswith("environment broke")]
    mean = sum(r["reward"] for r in last) / len(last) if last else 0.0
    q = sorted(exec_secs)
    pct = lambda f: q[min(len(q) - 1, max(0, int(f * len(q) + 0.999999) - 1))] * 1000 if q else 0.0  # noqa: E731
    print(f"\n{len(profiles)} rollouts, {len(episodes)} episodes ({len(episodes) - len(last)} broke off and were retried), "
          f"{len(errors)} failed")
    if last:
        print(f"mean reward {mean:.3f} ({len(last)} result{'' if len(last) == 1 else 's'})")
    else:
        print("mean reward - (no result)")
    print(f"execs {len(q)} in {wall:.1f}s: {len(q) / wall if wall else 0:.1f}/s, "
          f"p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms")
    return 1 if errors else 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", default=os.environ.get("MEGAFLOW_HEADS", "127.0.0.1:7070"),
                    help="comma-separated head gRPC addresses (default $MEGAFLOW_HEADS or 127.0.0.1:7070, "
                         "what `megaflow up` listens on)")
    ap.add_argument("--sandboxes", type=int, default=8, help="instances, one sandbox each at a time (1 to 1024)")
    ap.add_argument("--image", default=os.environ.get("MEGAFLOW_SANDBOX_IMAGE", "megaflow/busybox:test"),
                    help="sandbox image with sh and coreutils (default $MEGAFLOW_SANDBOX_IMAGE or megaflow/busybox:test)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the rollout profiles, as megaflow demo --seed")
    ap.add_argument("--max-steps", type=int, default=None, help="cap on the steps of each episode (default: the data's)")
    ap.add_argument("--tenant", default="demo", help="tenant that owns the sandboxes")
    args = ap.parse_args(argv)
    if not 1 <= args.sandboxes <= 1024:
        ap.error(f"--sandboxes {args.sandboxes}: want 1 to 1024")
    if args.max_steps is not None and not 1 <= args.max_steps <= 1000:
        ap.error(f"--max-steps {args.max_steps}: want 1 to 1000")
    if not 0 <= args.seed < 1 << 64:
        ap.error(f"--seed {args.seed}: want 0 to 2^64-1")
    return asyncio.run(run(args))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except megaflow.MegaflowError as e:
        print(f"agent_loop: {e}", file=sys.stderr)
        sys.exit(1)
