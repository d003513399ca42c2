"""Building rollout graphs: tasks, dependencies, resources, retries.

The builder mirrors Go's ``client.GraphBuilder``::

    g = megaflow.Graph("step-42", tenant="team-a")
    setup = g.task("setup", ["python", "setup.py"], image="env:v1", session="s0")
    roll = g.task("rollout", ["python", "rollout.py"], image="env:v1",
                  after=[setup], type="train", cpu="500m", memory="4Gi",
                  retries=2, timeout=1800)
    spec = g.build()   # a validated GraphSpec message

Nothing is checked until :meth:`Graph.build` (which :meth:`Client.submit`
calls): it runs the head's main checks locally and raises
:class:`~megaflow.errors.InvalidGraph` naming the graph, task and field.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Union

from ._proto import types_pb2 as pb
from .errors import InvalidGraph

__all__ = ["Graph", "Task", "Service", "parse_cpu", "parse_memory", "parse_seconds"]

Cpu = Union[str, int, float]
Memory = Union[str, int]
Duration = Union[int, float, datetime.timedelta, None]

MAX_NAME_LEN = 128
MIN_PRIORITY, MAX_PRIORITY = -1000, 1000
MAX_RETRIES = 100
MAX_TASK_TIMEOUT_S = 7 * 24 * 3600
MAX_GRAPH_DEADLINE_S = 30 * 24 * 3600
MAX_ENV_ENTRIES = 256
MAX_LABELS = 64
MAX_OUTPUT_PATHS = 64
MAX_COMMAND_ARGS = 1024
MAX_TASKS = 100_000

_IDENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\Z")
_TYPE = re.compile(r"[a-z]([a-z0-9-]{0,30}[a-z0-9])?\Z")
_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
_DECIMAL = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_cpu(value: Cpu) -> int:
    """Parse a CPU amount into millicores.

    Args:
        value: cores as a number (``2``, ``0.5``) or a string (``"2"``,
            ``"1.5"``), or millicores with the suffix m (``"500m"``), as in
            Kubernetes.

    Returns:
        Millicores (1000 = one core), rounded up to a whole millicore.

    Raises:
        InvalidGraph: not a non-negative amount.
    """
    if isinstance(value, bool):
        raise InvalidGraph(f"cpu: {value!r} is not an amount of CPU; use cores (2, 0.5) or millicores (\"500m\")")
    try:
        if isinstance(value, str) and value.strip().endswith("m"):
            millis = Decimal(value.strip()[:-1])
        else:
            millis = Decimal(str(value).strip()) * 1000
    except (InvalidOperation, ValueError):
        raise InvalidGraph(f"cpu: {value!r} is not an amount of CPU; use cores (2, 0.5) or millicores (\"500m\")") from None
    if not millis.is_finite() or millis < 0:
        raise InvalidGraph(f"cpu: {value!r} must be a non-negative amount")
    return int(math.ceil(millis))


def parse_memory(value: Memory) -> int:
    """Parse a memory amount into bytes.

    Args:
        value: bytes as an int, or a string with a binary suffix Ki, Mi, Gi,
            Ti (``"4Gi"`` = 4 * 2**30) or a decimal one k, M, G, T
            (``"500M"`` = 500 * 10**6); ``"1.5Gi"`` is allowed.

    Returns:
        Bytes, rounded up to a whole byte.

    Raises:
        InvalidGraph: not a non-negative amount.
    """
    hint = "use bytes (an int) or a string like \"512Mi\", \"4Gi\""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidGraph(f"memory: {value!r} is not an amount of memory; {hint}")
    if isinstance(value, int):
        n = Decimal(value)
    else:
        s, mult = value.strip().replace("_", ""), 1
        for table in (_BINARY, _DECIMAL):
            for suffix, m in table.items():
                if s.endswith(suffix):
                    s, mult = s[: -len(suffix)], m
                    break
            else:
                continue
            break
        try:
            n = Decimal(s) * mult
        except InvalidOperation:
            raise InvalidGraph(f"memory: {value!r} is not an amount of memory; {hint}") from None
    if not n.is_finite() or n < 0:
        raise InvalidGraph(f"memory: {value!r} must be a non-negative amount")
    return int(math.ceil(n))


def parse_seconds(value: Duration, field: str = "timeout") -> int:
    """Convert a duration into whole seconds, rounded up (as the Go builder).

    Args:
        value: seconds (int or float), a ``datetime.timedelta``, or None/0
            for none.
        field: the field named in an error.

    Returns:
        Whole seconds; 0 means none.

    Raises:
        InvalidGraph: negative or not a duration.
    """
    if value is None:
        return 0
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InvalidGraph(f"{field}: {value!r} is not a duration; use seconds or a datetime.timedelta")
    if value < 0:
        raise InvalidGraph(f"{field}: {value!r} is negative; use 0 for none")
    return int(math.ceil(value))


@dataclass
class Service:
    """A long-running task (a model server), published under a name.

    Attributes:
        name: the name its endpoint is published under, e.g. "model/qwen-7b".
        port: the port it listens on inside the task; 0: the worker assigns one.
        readiness_http_path: HTTP path probed for readiness; "" (and
            tcp_probe False): ready at start.
        tcp_probe: probe readiness by a TCP connect instead.
        restart_policy: "always" (default), "on-failure" or "never".
    """

    name: str
    port: int = 0
    readiness_http_path: str = ""
    tcp_probe: bool = False
    restart_policy: str = ""


class Task:
    """One task of a :class:`Graph`; made by :meth:`Graph.task`.

    Its methods return the task so calls chain::

        g.task("eval", ["python", "eval.py"], image="env:v1").after(rollout).env("SEED", "1")
    """

    def __init__(self, spec: pb.TaskSpec) -> None:
        self._spec = spec

    @property
    def name(self) -> str:
        """The task's name, unique within its graph."""
        return self._spec.name

    @property
    def spec(self) -> pb.TaskSpec:
        """The task's TaskSpec message as built so far (shared with the graph:
        changes to it show in the graph)."""
        return self._spec

    def after(self, *deps: Union["Task", str]) -> "Task":
        """Make the task wait for other tasks of the graph to succeed.

        Args:
            deps: tasks (as :meth:`Graph.task` returned them) or task names.

        Returns:
            The task.
        """
        for d in deps:
            self._spec.depends_on.append(d.name if isinstance(d, Task) else str(d))
        return self

    def env(self, key: str, value: str) -> "Task":
        """Set one environment variable of the task; returns the task."""
        self._spec.env[key] = value
        return self

    def output(self, *paths: str) -> "Task":
        """Collect these paths (relative to $MEGAFLOW_OUTPUT_DIR) as
        artifacts; returns the task."""
        self._spec.output_paths.extend(paths)
        return self


class Graph:
    """A rollout graph under construction (Go's ``client.GraphBuilder``).

    Args:
        id: client-chosen id ([A-Za-z0-9._-], 1 to 128 characters) that makes
            resubmission idempotent; None: :meth:`Client.submit` picks one.
        tenant: owning tenant; None: the client's tenant, else "default".
        name: human-readable name.
        priority: inherited by tasks whose priority is 0 (-1000 to 1000;
            higher runs first within a queue).
        labels: graph labels (e.g. ``{"megaflow.io/metric": "score"}``
            names the result field the head aggregates; default "reward").
        deadline: whole-graph deadline from submission, in seconds or a
            timedelta (rounded up); None: none.
    """

    def __init__(self, id: Optional[str] = None, *, tenant: Optional[str] = None,
                 name: Optional[str] = None, priority: int = 0,
                 labels: Optional[Mapping[str, str]] = None, deadline: Duration = None) -> None:
        try:
            self._spec = pb.GraphSpec(id=id or "", tenant=tenant or "", name=name or "", priority=priority)
            self._spec.labels.update(labels or {})
        except (TypeError, ValueError) as e:  # protobuf's type and range checks
            raise InvalidGraph(f"graph {id or ''!r}: {e}") from None
        self._spec.deadline_seconds = parse_seconds(deadline, "deadline")
        self._tasks: List[Task] = []

    @property
    def id(self) -> str:
        """The graph's id ("" until chosen)."""
        return self._spec.id

    @property
    def tasks(self) -> List[Task]:
        """The tasks added so far, in order."""
        return list(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def task(self, name: str, command: Sequence[str], *, image: str = "",
             after: Iterable[Union[Task, str]] = (), type: str = "",
             cpu: Optional[Cpu] = None, memory: Optional[Memory] = None,
             gpus: int = 0, gpu_model: str = "", gpu_memory: Optional[Memory] = None,
             env: Optional[Mapping[str, str]] = None, retries: int = 0,
             timeout: Duration = None, priority: int = 0,
             persistent: bool = False, session: str = "", gang: str = "",
             run_on_upstream_failure: bool = False,
             selector: Optional[Mapping[str, str]] = None,
             outputs: Sequence[str] = (), workdir: str = "", network: str = "",
             capabilities: Sequence[str] = (), runtime: str = "",
             service: Optional[Service] = None, uses_services: Sequence[str] = ()) -> Task:
        """Add a task and return it.

        Args:
            name: unique within the graph: [A-Za-z0-9._-], 1 to 128 characters.
            command: argv; the first element is the program (a str is
                refused: pass ``["sh", "-c", "..."]``).
            image: container image; required unless ``runtime="process"``
                (a plain process on a process-runtime worker needs none,
                but a persistent task or a session still does).
            after: tasks or task names this one waits for.
            type: queue: "train", "eval", "synth" or "" (the default queue).
            cpu: cores (``2``, ``0.5``) or millicores (``"500m"``).
            memory: bytes, or ``"512Mi"``, ``"4Gi"``.
            gpus: whole GPUs; gpu_model: required model (substring, "H100");
            gpu_memory: minimum memory per GPU, as memory.
            env: environment variables.
            retries: retries after a failed attempt, 0 to 100.
            timeout: per-attempt timeout in seconds or a timedelta (rounded
                up to whole seconds), at most 7 days; None: none.
            priority: within its queue; 0 inherits the graph's.
            persistent: run in a warm container of the worker's pool.
            session: tasks with the same session share one persistent
                container (implies persistent).
            gang: tasks of the graph with the same gang start all at once,
                each on its own worker (multi-node training).
            run_on_upstream_failure: run even when a dependency failed.
            selector: worker labels that must match exactly.
            outputs: paths (relative to $MEGAFLOW_OUTPUT_DIR) collected as
                artifacts.
            workdir: working directory; network: container network mode;
            capabilities: Linux capabilities to keep; runtime: "docker",
                "process" or "" (any worker).
            service: make it a long-running service (:class:`Service`).
            uses_services: names of services whose endpoints it receives
                (env MEGAFLOW_SERVICE_<NAME>).

        Returns:
            The :class:`Task`, for :meth:`Task.after` and the like.

        Raises:
            InvalidGraph: a value of the wrong type or unit (names,
                dependencies and ranges are checked by :meth:`build`).
        """
        if isinstance(command, (str, bytes)):
            raise InvalidGraph(f'task "{name}": command: give a list of arguments, e.g. ["sh", "-c", {command!r}], not a string')
        try:
            argv = [str(a) for a in command]
        except TypeError:
            raise InvalidGraph(f'task "{name}": command: {command!r} is not a list of arguments') from None
        try:
            t = pb.TaskSpec(name=name, image=image, command=argv, type=type, priority=priority,
                            max_retries=retries, session=session, gang=gang,
                            run_on_upstream_failure=run_on_upstream_failure, working_dir=workdir,
                            network=network, runtime=runtime)
            t.env.update(env or {})
            t.node_selector.update(selector or {})
            t.output_paths.extend(outputs)
            t.capabilities.extend(capabilities)
            t.uses_services.extend(uses_services)
        except (TypeError, ValueError) as e:  # protobuf's type and range checks
            raise InvalidGraph(f'task "{name}": {e}') from None
        t.timeout_seconds = parse_seconds(timeout, f'task "{name}": timeout')
        if cpu is not None or memory is not None or gpus or gpu_model or gpu_memory is not None:
            try:
                t.resources.CopyFrom(pb.Resources(
                    cpu_millis=parse_cpu(cpu) if cpu is not None else 0,
                    memory_bytes=parse_memory(memory) if memory is not None else 0,
                    gpus=gpus, gpu_model=gpu_model,
                    gpu_memory_bytes=parse_memory(gpu_memory) if gpu_memory is not None else 0))
            except InvalidGraph as e:
                raise InvalidGraph(f'task "{name}": {e.message}') from None
        if persistent or session:
            t.mode = pb.EXECUTION_MODE_PERSISTENT
        if service is not None:
            t.kind = pb.TASK_KIND_SERVICE
            t.service.CopyFrom(pb.ServiceSpec(name=service.name, port=service.port,
                                              readiness_http_path=service.readiness_http_path,
                                              tcp_probe=service.tcp_probe,
                                              restart_policy=service.restart_policy))
        spec = self._spec.tasks.add()
        spec.CopyFrom(t)
        task = Task(spec)
        task.after(*after)
        self._tasks.append(task)
        return task

    def build(self) -> pb.GraphSpec:
        """Validate the graph and return a copy of its GraphSpec message.

        The checks are the head's main ones: names, unique task names,
        commands, dependencies that exist and form no cycle, queue types,
        priorities, retries, timeouts, resources, limits on entries. The head
        checks everything again on submit.

        Returns:
            A new ``GraphSpec``; the graph may be changed and built again.

        Raises:
            InvalidGraph: names the graph, the task and the field.
        """
        g = pb.GraphSpec()
        g.CopyFrom(self._spec)
        validate(g)
        return g


def _ident_problem(s: str) -> str:
    if not s:
        return f"is empty; use 1 to {MAX_NAME_LEN} letters, digits, '.', '_' or '-'"
    if len(s.encode()) > MAX_NAME_LEN:
        return f"{s!r} is longer than {MAX_NAME_LEN} bytes"
    if not _IDENT.match(s):
        return f"{s!r} may hold only letters, digits, '.', '_' or '-', and not start with '.' or '-'"
    return ""


def validate(g: pb.GraphSpec) -> None:
    """Check a GraphSpec as :meth:`Graph.build` does.

    Args:
        g: the spec; an empty id or tenant is allowed (chosen on submit).

    Raises:
        InvalidGraph: the first problem found, naming graph, task and field.
    """
    gname = f'graph "{g.id}"' if g.id else "graph"

    def fail(msg: str) -> None:
        raise InvalidGraph(f"{gname}: {msg}")

    if g.id and (p := _ident_problem(g.id)):
        fail(f"id: {p}")
    if g.tenant and (p := _ident_problem(g.tenant)):
        fail(f"tenant: {p}")
    if not MIN_PRIORITY <= g.priority <= MAX_PRIORITY:
        fail(f"priority: {g.priority} is outside [{MIN_PRIORITY}, {MAX_PRIORITY}]")
    if not 0 <= g.deadline_seconds <= MAX_GRAPH_DEADLINE_S:
        fail(f"deadline_seconds: {g.deadline_seconds} is outside [0, {MAX_GRAPH_DEADLINE_S}] (30 days)")
    if len(g.labels) > MAX_LABELS:
        fail(f"labels: {len(g.labels)} entries; the limit is {MAX_LABELS}")
    if not g.tasks:
        fail("tasks: the graph has no task; add one with Graph.task")
    if len(g.tasks) > MAX_TASKS:
        fail(f"tasks: {len(g.tasks)} tasks; the limit is {MAX_TASKS}")
    index: Dict[str, int] = {}
    for i, t in enumerate(g.tasks):
        if p := _ident_problem(t.name):
            fail(f"tasks[{i}]: name: {p}")
        if t.name in index:
            fail(f'task "{t.name}": name: also the name of tasks[{index[t.name]}]; task names must be unique within a graph')
        index[t.name] = i
    for t in g.tasks:
        def tfail(field: str, msg: str) -> None:
            fail(f'task "{t.name}": {field}: {msg}')

        if t.runtime not in ("", "docker", "process"):
            tfail("runtime", f'{t.runtime!r} is not a runtime; use "docker" (containers: never a process worker), '
                  '"process", or "" for any worker')
        if not t.image:
            if t.runtime == "docker":
                tfail("image", 'is empty; name a container image, e.g. "python:3.12-slim"')
            if t.runtime != "process":
                tfail("image", 'is empty; name a container image, e.g. "python:3.12-slim", or set '
                      'runtime="process" to run the command as a plain process without an image '
                      '(on process-runtime workers only)')
            if t.mode == pb.EXECUTION_MODE_PERSISTENT or t.session:
                tfail("image", "is empty; a persistent task or a session runs in a container even on a "
                      'process-runtime worker: name its image, e.g. "python:3.12-slim"')
        elif len(t.image) > 512 or any(not " " < ch < "\x7f" for ch in t.image) or t.image[0] == "-":
            tfail("image", f"{t.image!r} is not an image reference (printable ASCII, no spaces, up to 512 bytes)")
        if not t.command:
            tfail("command", 'is empty; give the program and its arguments, e.g. ["python", "rollout.py"]')
        if len(t.command) > MAX_COMMAND_ARGS:
            tfail("command", f"has {len(t.command)} elements; the limit is {MAX_COMMAND_ARGS}")
        if not t.command[0]:
            tfail("command[0]", 'the program is empty; give the program to run, e.g. "python"')
        if len(t.env) > MAX_ENV_ENTRIES:
            tfail("env", f"{len(t.env)} entries; the limit is {MAX_ENV_ENTRIES}")
        for k in t.env:
            if not k or "=" in k or "\x00" in k:
                tfail("env", f"{k!r} is not a variable name")
        r = t.resources
        for field in ("cpu_millis", "memory_bytes", "gpus", "gpu_memory_bytes"):
            if getattr(r, field) < 0:
                tfail(f"resources.{field}", f"{getattr(r, field)} is negative")
        if t.type and not _TYPE.match(t.type):
            tfail("type", f'{t.type!r}: use "train", "eval", "synth", "" (the default queue) or a custom queue name '
                          "of 1 to 32 lowercase letters, digits or '-' starting with a letter")
        if t.priority and not MIN_PRIORITY <= t.priority <= MAX_PRIORITY:
            tfail("priority", f"{t.priority} is outside [{MIN_PRIORITY}, {MAX_PRIORITY}]; or 0 to inherit the graph's")
        if not 0 <= t.max_retries <= MAX_RETRIES:
            tfail("max_retries", f"{t.max_retries} is outside [0, {MAX_RETRIES}]")
        if not 0 <= t.timeout_seconds <= MAX_TASK_TIMEOUT_S:
            tfail("timeout_seconds", f"{t.timeout_seconds} is outside [0, {MAX_TASK_TIMEOUT_S}] (7 days)")
        if t.session and (p := _ident_problem(t.session)):
            tfail("session", p)
        if t.gang and (p := _ident_problem(t.gang)):
            tfail("gang", p)
        if len(t.output_paths) > MAX_OUTPUT_PATHS:
            tfail("output_paths", f"{len(t.output_paths)} paths; the limit is {MAX_OUTPUT_PATHS}")
        if len(t.node_selector) > MAX_LABELS:
            tfail("node_selector", f"{len(t.node_selector)} entries; the limit is {MAX_LABELS}")
        seen = set()
        for d in t.depends_on:
            if d == t.name:
                tfail("depends_on", "a task cannot depend on itself")
            if d not in index:
                tfail("depends_on", f'unknown task "{d}"')
            if d in seen:
                tfail("depends_on", f'"{d}" is listed twice')
            seen.add(d)
    _check_cycles(g, fail)


def _check_cycles(g: pb.GraphSpec, fail) -> None:
    # Kahn's algorithm; what is left over lies on or behind a cycle.
    deps = {t.name: list(t.depends_on) for t in g.tasks}
    indeg = {n: len(ds) for n, ds in deps.items()}
    users: Dict[str, List[str]] = {n: [] for n in deps}
    for n, ds in deps.items():
        for d in ds:
            users[d].append(n)
    ready = [n for n, k in indeg.items() if k == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if done == len(deps):
        return
    # Walk back along dependencies from a leftover task until a name repeats.
    n = next(n for n, k in indeg.items() if k > 0)
    path: List[str] = []
    while n not in path:
        path.append(n)
        n = next(d for d in deps[n] if indeg[d] > 0)
    cycle = path[path.index(n):] + [n]
    fail(f'task "{cycle[0]}": depends_on: dependency cycle {" -> ".join(cycle)}')
