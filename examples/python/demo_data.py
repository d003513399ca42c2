"""The data side of `megaflow demo`, in Python, for the examples beside it.

It reads examples/demo/data (the SWE-Gym training instances and the 50
OpenHands rollouts) the way examples/demo/data.go does, and draws each
instance's rollout profile exactly as examples/demo/graph.go does: Go's
math/rand/v2 PCG (DXSM) seeded with (seed, FNV-1a 64 of the instance id)
and its ``IntN``, so that the same seed gives the same profiles, and so the
same graph, as ``megaflow demo``. It also formats the summary table as
``megaflow demo`` prints it (cmd/megaflow/watch.go's printSummary).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence

DATA_DIR = Path(__file__).resolve().parent.parent / "demo" / "data"
"""examples/demo/data, where the data files are."""

MAX_STEP_SECONDS = 120
"""Per-step gaps over this many seconds span an agent restart, not a step (as data.go)."""

MODEL = "model"
"""The model service's task name and service name (demo.Model)."""

ENV_MODEL = "MEGAFLOW_SERVICE_MODEL"
"""The variable that carries the model endpoints to the agent (demo.EnvModel)."""

TOOLS = [
    "ls -la repo",
    "find repo -type f | head -20",
    "grep -rn def repo | head -5",
    "wc -l repo/*.py",
    "cat repo/README",
    "grep -rn TODO repo | head -3",
    "echo '# fix' >> repo/patch.diff && cat repo/patch.diff | wc -l",
]
"""The shell commands the demo's mock model answers, one per step in turn (examples/demo/model.go)."""

_M64 = (1 << 64) - 1


class PCG:
    """Go's math/rand/v2 PCG source with its Rand.IntN: the same seeds give
    the same numbers as Go."""

    _MUL = (2549297995355413924 << 64) | 4865540595714422341
    _INC = (6364136223846793005 << 64) | 1442695040888963407

    def __init__(self, seed1: int, seed2: int) -> None:
        self._state = ((seed1 & _M64) << 64) | (seed2 & _M64)

    def uint64(self) -> int:
        """The next uniformly distributed 64-bit value."""
        self._state = (self._state * self._MUL + self._INC) & ((1 << 128) - 1)
        hi, lo = self._state >> 64, self._state & _M64
        hi ^= hi >> 32
        hi = (hi * 0xDA942042E4DD58B5) & _M64
        hi ^= hi >> 48
        return (hi * (lo | 1)) & _M64

    def intn(self, n: int) -> int:
        """A value in [0, n), as Go's Rand.IntN (n >= 1)."""
        if n < 1:
            raise ValueError(f"intn: n {n} must be at least 1")
        if n & (n - 1) == 0:
            return self.uint64() & (n - 1)
        p = self.uint64() * n
        hi, lo = p >> 64, p & _M64
        if lo < n:
            thresh = ((1 << 64) - n) % n
            while lo < thresh:
                p = self.uint64() * n
                hi, lo = p >> 64, p & _M64
        return hi


def fnv1a64(s: str) -> int:
    """FNV-1a, 64 bits, of s's UTF-8 bytes (Go's hash/fnv New64a)."""
    h = 14695981039346656037
    for b in s.encode():
        h = ((h ^ b) * 1099511628211) & _M64
    return h


@dataclass
class Instance:
    """One SWE-Gym training instance: id, repository owner/name, resource factor (1 or 2)."""
    id: str
    repo: str
    factor: int


@dataclass
class Rollout:
    """One OpenHands rollout of the data: attempts (1 to 3), steps of the last
    attempt, end state (FINISHED or ERROR), init time in seconds."""
    instance: str
    attempts: int
    steps: int
    end_state: str
    init_seconds: float


@dataclass
class Profile:
    """What the data decided for one instance's rollout (demo.Profile);
    times in milliseconds, already divided by the speedup."""
    instance: Instance
    source: str
    attempts: int
    init_millis: int
    step_millis: List[int] = field(default_factory=list)
    finished: bool = True


class Data:
    """The demo's data set (demo.Load)."""

    def __init__(self, data_dir: Path = DATA_DIR) -> None:
        with open(data_dir / "resource_factor_SWE-Gym_train.json") as f:
            raw: Dict[str, int] = json.load(f)  # dicts keep the file's order
        self.instances: List[Instance] = []
        for iid, factor in raw.items():
            owner, sep, rest = iid.partition("__")
            i = rest.rfind("-")
            if not sep or i <= 0:
                raise ValueError(f"{data_dir}: instance id {iid!r} is not owner__repo-number")
            self.instances.append(Instance(iid, owner + "/" + rest[:i], max(int(factor), 1)))
        self.rollouts: List[Rollout] = []
        with open(data_dir / "rollout_phases_swebv_50.csv", newline="") as f:
            for row in csv.DictReader(f):
                try:
                    init = float(row["init_s"])
                except ValueError:
                    init = 0.0
                self.rollouts.append(Rollout(row["instance_id"], max(int(row["agent_attempts"]), 1),
                                             max(int(row["agent_steps_last_attempt"]), 1), row["end_state"], init))
        gaps = []
        with open(data_dir / "llm_call_times_swebv_50.csv", newline="") as f:
            for row in csv.DictReader(f):
                try:
                    g = float(row["gap_from_prev_call_s"])
                except ValueError:
                    continue  # the first call of a rollout has no gap
                if 0 < g <= MAX_STEP_SECONDS:
                    gaps.append(g)
        self.step_seconds = sorted(gaps)

    def repos(self) -> List[str]:
        """The distinct repositories, in order of first appearance."""
        return list(dict.fromkeys(i.repo for i in self.instances))

    def pick(self, n: int) -> List[Instance]:
        """n instances, round-robin across the repositories (demo's Data.Pick)."""
        by_repo: Dict[str, List[Instance]] = {}
        for i in self.instances:
            by_repo.setdefault(i.repo, []).append(i)
        n = min(n, len(self.instances))
        out: List[Instance] = []
        rnd = 0
        while len(out) < n:
            for r in self.repos():
                if rnd < len(by_repo[r]) and len(out) < n:
                    out.append(by_repo[r][rnd])
            rnd += 1
        return out

    def profile(self, inst: Instance, seed: int, speedup: float) -> Profile:
        """The instance's rollout drawn from the data, as demo's Data.profile."""
        rng = PCG(seed, fnv1a64(inst.id))
        r = self.rollouts[rng.intn(len(self.rollouts))]
        p = Profile(inst, r.instance, r.attempts, int(r.init_seconds * 1000 / speedup), finished=r.end_state != "ERROR")
        for _ in range(r.steps):
            s = self.step_seconds[rng.intn(len(self.step_seconds))]
            p.step_millis.append(int(s * 1000 / speedup))
        return p


def image_of(repo: str) -> str:
    """The demo image of a repository: megaflow/swegym-<name>:demo."""
    return "megaflow/swegym-" + repo.partition("/")[2].lower() + ":demo"


def go_g(x: float) -> str:
    """x as Go's %g prints it, for the values the demo allows (1 to 10000)."""
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


def step_summary(profiles: Sequence[Profile], images: int, speedup: float) -> str:
    """The one-line description of a step (demo's Step.Summary)."""
    steps = sum(len(p.step_millis) for p in profiles)
    failing = sum(p.attempts - 1 for p in profiles)
    ms = sum(sum(p.step_millis) for p in profiles)
    n = len(profiles)
    return (f"{n} rollouts (setup -> agent rollout -> evaluation, one session each) on {images} repository images; "
            f"{steps} agent steps in all (mean {steps / max(n, 1):.1f} per rollout); {failing} agent attempt(s) fail "
            f"and are retried, as in the data; times compressed {go_g(speedup)}x (a mean step of "
            f"{ms * speedup / 1000 / max(steps, 1):.1f} s runs in {ms // max(steps, 1)} ms)")


def go_duration(seconds: float) -> str:
    """seconds as Go's time.Duration(...).Round(time.Millisecond).String()."""
    ns = int(seconds * 1e9)
    ms = int(math.copysign((abs(ns) + 500_000) // 1_000_000, ns))
    if ms == 0:
        return "0s"
    neg, ms = ms < 0, abs(ms)
    if ms < 1000:
        out = f"{ms}ms"
    else:
        h, rest = divmod(ms, 3_600_000)
        m, rest = divmod(rest, 60_000)
        s, frac = divmod(rest, 1000)
        sec = f"{s}.{frac:03d}".rstrip("0").rstrip(".") + "s"
        out = (f"{h}h{m}m" if h else f"{m}m" if m else "") + sec
    return "-" + out if neg else out


def tabwrite(lines: Sequence[str], padding: int = 2) -> str:
    """Aligns tab-separated cells as Go's text/tabwriter (minwidth 0,
    padchar ' ', no flags): a column's width is set per block of
    consecutive lines that have a tab-terminated cell in it."""
    cells = [ln.split("\t") for ln in lines]
    out: List[str] = []

    def write(widths: List[int], a: int, b: int) -> None:
        for row in cells[a:b]:
            out.append("".join(c.ljust(widths[j]) if j < len(widths) else c for j, c in enumerate(row)))

    def fmt(widths: List[int], a: int, b: int) -> None:
        col = len(widths)
        this = a
        while this < b:
            if col >= len(cells[this]) - 1:
                this += 1
                continue
            write(widths, a, this)
            a = this
            width = 0
            while this < b and col < len(cells[this]) - 1:
                width = max(width, len(cells[this][col]) + padding)
                this += 1
            fmt(widths + [width], a, this)
            a = this
        write(widths, a, b)

    fmt([], 0, len(cells))
    return "\n".join(out) + "\n"
