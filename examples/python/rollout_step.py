#!/usr/bin/python3
"""The `megaflow demo` SWE-Gym rollout step, from Python.

Builds the same graph as ``megaflow demo`` (cmd/megaflow/demo.go,
examples/demo/graph.go) with the Python graph builder, submits it to a
running cluster and prints the same summary table, so the two compare line
by line::

    megaflow up --runtime process &            # prints ready: ... (gRPC on 127.0.0.1:7070)
    python3 examples/python/rollout_step.py --runtime process --bin-dir bin --instances 8 --speedup 300

The graph: per SWE-Gym instance (picked round-robin across repositories) a
chain setup -> agent rollout (type train, retried as the data's failed
attempts require) -> evaluation (type eval) in one persistent session, with
the step counts and times drawn from the data by the same seeded generator
as Go's (demo_data.py ports math/rand/v2's PCG), so ``--seed`` gives the
same graph as ``megaflow demo --seed``. ``--print-graph`` prints it as JSON
(the proto field names, as ``megaflow demo graph`` writes its YAML).

The model server is a service task, in a graph of its own
("<graph-id>-model") cancelled when the step ends, as ``megaflow demo``
does; ``--model-url`` instead points the rollouts at a server you run.

What differs from ``megaflow demo``: this script does not start a cluster
(it needs one: ``megaflow up``), so it prints no cluster description nor
"demo time"; it has no live progress bar (``Client.wait`` prints a
one-line progress report on a terminal); the docker runtime needs the demo
images (``make demo-images``), which it does not check for. Everything in
the demo graph is expressible with the Python builder (services,
uses_services, sessions, queues, retries, timeouts, outputs, network).

Exit codes as ``megaflow demo``: 0 the step succeeded, 3 it failed, 4 it
was cancelled; 2 bad arguments; 1 any other error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client" / "python" / "src"))

import megaflow  # noqa: E402
from google.protobuf import json_format  # noqa: E402

import demo_data  # noqa: E402

EXIT_FAILED, EXIT_CANCELLED = 3, 4


def build(data: demo_data.Data, args: argparse.Namespace) -> Tuple[megaflow.Graph, List[demo_data.Profile], List[str]]:
    """The step's graph, with the profiles and images it uses (demo's Data.Build)."""
    # With docker the rollouts share the host's network, which the built-in
    # admission policy refuses: an admin allows it for the tenant first
    # (megaflow policy set TENANT --allow-network '*' --allow-network host;
    # docs/security.md). megaflow demo does so on its embedded cluster.
    net = "host" if args.runtime == "docker" else ""
    g = megaflow.Graph(args.graph_id, tenant=args.tenant, labels={"megaflow.io/metric": "reward"},
                       name=f"SWE-Gym rollout step: {args.instances} instances, times / {demo_data.go_g(args.speedup)}")
    if not args.model_url:
        g.task(demo_data.MODEL, [args.model_path], image=demo_data.image_of(data.instances[0].repo), cpu="250m",
               memory=64 << 20, network=net,
               service=megaflow.Service(name=demo_data.MODEL, readiness_http_path="/health"))
    profiles, images = [], set()
    for inst in data.pick(args.instances):
        p = data.profile(inst, args.seed, args.speedup)
        profiles.append(p)
        img = demo_data.image_of(inst.repo)
        images.add(img)
        d = args.work_root
        if args.runtime == "process":
            d = os.path.join(args.work_root, args.graph_id, inst.id)
        res = dict(cpu=f"{100 * inst.factor}m", memory=(64 << 20) * inst.factor, network=net, session=inst.id)
        setup = g.task(f"setup.{inst.id}", [args.agent_path, "setup", "--dir", d, "--repo", inst.repo,
                                            "--init-ms", str(p.init_millis)], image=img, retries=2, timeout=300, **res)
        rollout = g.task(f"rollout.{inst.id}",
                         [args.agent_path, "rollout", "--dir", d, "--instance", inst.id,
                          "--step-ms", ",".join(str(m) for m in p.step_millis),
                          "--fail-attempts", str(p.attempts - 1), "--end", "finished" if p.finished else "step-limit"],
                         image=img, after=[setup], type="train", retries=3, timeout=600,
                         workdir=d if args.runtime == "docker" else "",
                         outputs=["trajectory.jsonl"] if args.runtime == "docker" else (),
                         env={demo_data.ENV_MODEL: args.model_url} if args.model_url else None,
                         uses_services=() if args.model_url else [demo_data.MODEL], **res)
        g.task(f"eval.{inst.id}", [args.agent_path, "eval", "--dir", d], image=img, after=[rollout], type="eval",
               retries=2, timeout=300, **res)
    return g, profiles, sorted(images)


def split_services(spec: megaflow.GraphSpec) -> Tuple[megaflow.GraphSpec, megaflow.GraphSpec]:
    """The spec's service tasks as a graph "<id>-model", and the spec without them (demo's splitServices)."""
    services, rest = megaflow.GraphSpec(), megaflow.GraphSpec()
    services.CopyFrom(spec)
    rest.CopyFrom(spec)
    services.id = spec.id + "-model"
    if spec.name:
        services.name = spec.name + " (model)"
    del services.tasks[:]
    del rest.tasks[:]
    for t in spec.tasks:
        (services if t.kind == megaflow.TaskSpec.DESCRIPTOR.fields_by_name["kind"].enum_type.values_by_name[
            "TASK_KIND_SERVICE"].number else rest).tasks.add().CopyFrom(t)
    return services, rest


def percentile(v: List[float], q: float) -> float:
    """Nearest-rank q-quantile of v, 0 for none (cmd/megaflow's percentile)."""
    if not v:
        return 0.0
    v = sorted(v)
    i = int(q * len(v) + 0.999999) - 1
    return v[min(max(i, 0), len(v) - 1)]


def summary_lines(c: megaflow.Client, g: megaflow.GraphRow) -> List[str]:
    """The summary table `megaflow demo` prints for a finished graph, as lines."""
    state = megaflow.graph_state_name(g.state).lower()
    cn = g.counts
    counts = {"succeeded": cn.succeeded, "failed": cn.failed, "timed_out": cn.timed_out, "cancelled": cn.cancelled,
              "running": cn.running, "assigned": cn.assigned, "queued": cn.queued, "pending": cn.pending}
    stopped = restarts = attempts = retried = 0
    secs: List[float] = []
    stopped_reason = megaflow.ReasonCode.Value("REASON_CODE_STOPPED_WITH_GRAPH")
    ran_to_an_end = (megaflow.TASK_STATE_SUCCEEDED, megaflow.TASK_STATE_FAILED, megaflow.TASK_STATE_TIMED_OUT)
    for t in c.tasks(g.id):
        restarts += t.restarts
        if t.state == megaflow.TASK_STATE_CANCELLED and t.reason_code == stopped_reason:
            stopped += 1
            continue
        attempts += len(t.attempts)
        if len(t.attempts) > 1:
            retried += 1
        if t.attempts and t.state in ran_to_an_end:  # cancelled tasks are left out, as from the success rate
            a = t.attempts[-1]
            if a.start_unix_nanos > 0 and a.finish_unix_nanos >= a.start_unix_nanos:
                secs.append((a.finish_unix_nanos - a.start_unix_nanos) / 1e9)
    m = g.metrics
    plural = lambda n, noun: f"1 {noun}" if n == 1 else f"{n} {noun}s"  # noqa: E731
    rows = []
    for k in ("succeeded", "failed", "timed_out", "cancelled", "running", "assigned", "queued", "pending"):
        if k == "cancelled" and stopped > 0:
            rows.append(f"  {k}\t{counts[k]}\t({plural(stopped, 'service')} stopped with the graph)")
        elif counts[k] > 0 or k in ("succeeded", "failed"):
            rows.append(f"  {k}\t{counts[k]}")
    rows.append(f"  total\t{sum(counts.values())}\t({g.task_count} tasks submitted)")
    finished = counts["succeeded"] + counts["failed"] + counts["timed_out"]
    if finished > 0 and counts["cancelled"] > 0:
        # The rate is of the tasks that ran to an end, as megaflow's own summary says.
        rows.append(f"success rate\t{100 * m.success_rate:.1f}%\t({counts['succeeded']} of {finished} finished; "
                    f"{counts['cancelled']} cancelled, not counted)")
    elif finished > 0:
        rows.append(f"success rate\t{100 * m.success_rate:.1f}%")
    else:
        rows.append("success rate\t-\t(no task finished)")
    if m.count > 0:
        rows.append(f"mean {m.field}\t{m.mean:.3f}\t({m.count} result{'' if m.count == 1 else 's'})")
    else:
        rows.append(f"mean {m.field or '-'}\t-\t(no result carries it)")
    if secs:
        p50, p99 = demo_data.go_duration(percentile(secs, 0.5)), demo_data.go_duration(percentile(secs, 0.99))
        rows.append(f"task time p50 / p99\t{p50} / {p99}\t(last attempt of each of {plural(len(secs), 'task')} that ran to an end)")
    else:
        rows.append("task time p50 / p99\t-\t(no task ran to an end)")
    rows.append(f"attempts\t{attempts}\t({plural(retried, 'task')} retried)")
    if restarts > 0:
        rows.append(f"service restarts\t{restarts}\t(megaflow tasks {g.id} shows why)")
    rows.append(f"wall time\t{demo_data.go_duration(m.wall_millis / 1000)}")
    return ["", f"graph {g.id} {state}"] + demo_data.tabwrite(rows).splitlines()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", default=os.environ.get("MEGAFLOW_HEADS", "127.0.0.1:7070"),
                    help="comma-separated head gRPC addresses (default $MEGAFLOW_HEADS or 127.0.0.1:7070, "
                         "what `megaflow up` listens on)")
    ap.add_argument("--instances", type=int, default=64, help="SWE-Gym training instances, one rollout each (1 to 2119)")
    ap.add_argument("--speedup", type=float, default=30, help="every time taken from the data is divided by this (1 to 10000)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the rollout profiles and step times (0 to 2^64-1)")
    ap.add_argument("--graph-id", default="swegym-step-1", help="id of the step's graph")
    ap.add_argument("--tenant", default="demo", help="tenant that owns the graphs")
    ap.add_argument("--runtime", choices=("docker", "process"), default="docker",
                    help="the workers' runtime: docker (programs in the demo images) or process (--bin-dir's programs)")
    ap.add_argument("--bin-dir", default="bin", help="process runtime: directory of megaflow-agent and megaflow-model")
    ap.add_argument("--work-root", default=None,
                    help="where each session keeps its workspace (default /work; process runtime: "
                         "$TMPDIR/megaflow-demo-work)")
    ap.add_argument("--model-url", default="", help="model endpoint the rollouts call; empty: a model service task")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the step")
    ap.add_argument("--print-graph", action="store_true", help="print the step's graph as JSON and exit (no cluster)")
    args = ap.parse_args(argv)
    data = demo_data.Data()
    if not 1 <= args.instances <= len(data.instances):
        ap.error(f"--instances {args.instances}: want 1 to {len(data.instances)} (the SWE-Gym training instances)")
    if not 1 <= args.speedup <= 10000:
        ap.error(f"--speedup {args.speedup:g}: want 1 (real time) to 10000")
    if not 0 <= args.seed < 1 << 64:
        ap.error(f"--seed {args.seed}: want 0 to 2^64-1")
    if args.runtime == "process":
        bin_dir = Path(args.bin_dir).resolve()
        args.agent_path, args.model_path = str(bin_dir / "megaflow-agent"), str(bin_dir / "megaflow-model")
        missing = [p for p in (args.agent_path, args.model_path) if not os.access(p, os.X_OK)]
        if missing:
            ap.error(f"the process runtime runs {', '.join(missing)}, missing: run `make build` or give --bin-dir")
        args.work_root = args.work_root or os.path.join(os.environ.get("TMPDIR", "/tmp"), "megaflow-demo-work")
    else:
        args.agent_path, args.model_path = "/bin/megaflow-agent", "/bin/megaflow-model"
        args.work_root = args.work_root or "/work"
    try:
        graph, profiles, images = build(data, args)
        spec = graph.build()
    except megaflow.InvalidGraph as e:
        ap.error(str(e))
    if args.print_graph:
        print(json.dumps(json_format.MessageToDict(spec, preserving_proto_field_name=True), indent=2))
        return 0
    print(f"== the step: {demo_data.step_summary(profiles, len(images), args.speedup)}")
    heads = [h.strip() for h in args.heads.split(",") if h.strip()]
    with megaflow.Client(heads, tenant=args.tenant) as c:
        model_id = None
        if not args.model_url:
            model, spec = split_services(spec)
            model_id = c.submit(model)
            print(f"== submitted graph {model_id}: the model service task, published to the rollouts as "
                  f"{demo_data.ENV_MODEL}")
        try:
            gid = c.submit(spec)
            print(f"== submitted graph {gid}: {len(spec.tasks)} tasks")
            g = c.wait(gid, timeout=args.timeout)
            print("\n".join(summary_lines(c, g)))
        finally:
            if model_id is not None:
                try:
                    c.cancel_graph(model_id, "the demo step ended")
                except megaflow.MegaflowError as e:
                    print(f"rollout_step: cancel the model graph {model_id}: {e}", file=sys.stderr)
    if g.state == megaflow.GRAPH_STATE_SUCCEEDED:
        return 0
    return EXIT_CANCELLED if g.state == megaflow.GRAPH_STATE_CANCELLED else EXIT_FAILED


if __name__ == "__main__":
    try:
        sys.exit(main())
    except megaflow.MegaflowError as e:
        print(f"rollout_step: {e}", file=sys.stderr)
        sys.exit(1)
