"""The graph builder and its local checks (no server)."""

import datetime

import pytest

import megaflow
from megaflow._proto import types_pb2 as pb


@pytest.mark.parametrize("value,millis", [(2, 2000), (0.5, 500), ("1.5", 1500), ("500m", 500), ("250m", 250),
                                          (" 3 ", 3000), ("0.0001", 1)])
def test_cpu_units(value, millis):
    assert megaflow.parse_cpu(value) == millis


@pytest.mark.parametrize("value", ["-1", "1x", "m", "", True, "nan", -0.5])
def test_bad_cpu(value):
    with pytest.raises(megaflow.InvalidGraph, match="cpu"):
        megaflow.parse_cpu(value)


@pytest.mark.parametrize("value,nbytes", [(1024, 1024), ("4Gi", 4 << 30), ("512Mi", 512 << 20), ("1.5Gi", 3 << 29),
                                          ("500M", 500_000_000), ("2k", 2000), ("1Ti", 1 << 40), ("100", 100)])
def test_memory_units(value, nbytes):
    assert megaflow.parse_memory(value) == nbytes


@pytest.mark.parametrize("value", ["4GB", "-1Gi", "lots", 1.5, None, "Gi"])
def test_bad_memory(value):
    with pytest.raises(megaflow.InvalidGraph, match="memory"):
        megaflow.parse_memory(value)


def test_durations_round_up():
    assert megaflow.parse_seconds(None) == 0
    assert megaflow.parse_seconds(1.2) == 2
    assert megaflow.parse_seconds(datetime.timedelta(minutes=30)) == 1800
    with pytest.raises(megaflow.InvalidGraph, match="negative"):
        megaflow.parse_seconds(-1)


def test_builder_sets_every_field():
    g = megaflow.Graph("step-42", tenant="team-a", name="rollout step 42", priority=5,
                       labels={"megaflow.io/metric": "score"}, deadline=datetime.timedelta(hours=1))
    setup = g.task("setup", ["python", "setup.py"], image="env:v1", session="s0")
    roll = g.task("rollout", ["python", "rollout.py"], image="env:v1", after=[setup], type="train",
                  cpu="500m", memory="4Gi", gpus=1, gpu_model="H100", retries=2, timeout=1800,
                  env={"SEED": "1"}, selector={"zone": "a"}, outputs=["traj"], gang="g0")
    roll.env("MORE", "x").output("more")
    g.task("judge", ["python", "judge.py"], image="env:v1", uses_services=["model/judge"]).after("rollout")
    g.task("server", ["vllm"], image="vllm:v1",
           service=megaflow.Service("model/judge", port=8000, readiness_http_path="/health"))
    spec = g.build()
    assert (spec.id, spec.tenant, spec.name, spec.priority, spec.deadline_seconds) == \
        ("step-42", "team-a", "rollout step 42", 5, 3600)
    assert spec.labels["megaflow.io/metric"] == "score"
    s, r, j, v = spec.tasks
    assert s.mode == pb.EXECUTION_MODE_PERSISTENT and s.session == "s0"
    assert list(r.depends_on) == ["setup"] and r.type == "train"
    assert (r.resources.cpu_millis, r.resources.memory_bytes, r.resources.gpus, r.resources.gpu_model) == \
        (500, 4 << 30, 1, "H100")
    assert (r.max_retries, r.timeout_seconds, r.gang) == (2, 1800, "g0")
    assert dict(r.env) == {"SEED": "1", "MORE": "x"} and list(r.output_paths) == ["traj", "more"]
    assert dict(r.node_selector) == {"zone": "a"}
    assert list(j.depends_on) == ["rollout"] and list(j.uses_services) == ["model/judge"]
    assert v.kind == pb.TASK_KIND_SERVICE and v.service.name == "model/judge" and v.service.port == 8000
    spec.tasks[0].name = "changed"
    assert g.tasks[0].name == "setup"  # build returns a copy
    assert len(g) == 4


def _graph_with(**task):
    g = megaflow.Graph("step-1")
    kw = dict(image="busybox")
    kw.update(task)
    cmd = kw.pop("command", ["true"])
    g.task(kw.pop("name", "a"), cmd, **kw)
    return g


@pytest.mark.parametrize("task,message", [
    (dict(name="bad name"), r'tasks\[0\]: name: .* may hold only'),
    (dict(name=".hidden"), "not start with '.'"),
    (dict(image=""), 'task "a": image: is empty; .* or set runtime="process"'),
    (dict(image="", runtime="process", persistent=True), 'task "a": image: is empty; a persistent task'),
    (dict(image="", runtime="docker"), 'task "a": image: is empty'),
    (dict(image="", runtime="proces"), 'task "a": runtime: \'proces\' is not a runtime'),
    (dict(runtime="podman"), 'task "a": runtime: \'podman\' is not a runtime'),
    (dict(command=[]), 'task "a": command: is empty'),
    (dict(command=[""]), r'command\[0\]: the program is empty'),
    (dict(type="Train"), 'task "a": type:'),
    (dict(retries=101), r"max_retries: 101 is outside \[0, 100\]"),
    (dict(timeout=8 * 24 * 3600), "timeout_seconds"),
    (dict(priority=5000), "priority: 5000"),
    (dict(after=["a"]), "cannot depend on itself"),
    (dict(after=["zz"]), 'unknown task "zz"'),
    (dict(session="s 1"), "session:"),
])
def test_local_checks_name_the_field(task, message):
    with pytest.raises(megaflow.InvalidGraph, match=message):
        _graph_with(**task).build()


def test_a_plain_process_needs_no_image():
    g = megaflow.Graph("x")
    g.task("a", ["true"], runtime="process")
    assert g.build().tasks[0].image == ""


def test_command_must_be_a_list():
    g = megaflow.Graph("x")
    with pytest.raises(megaflow.InvalidGraph, match=r'give a list of arguments, e.g. \["sh", "-c"'):
        g.task("a", "echo hi", image="busybox")


def test_duplicate_names_and_cycles():
    g = megaflow.Graph("x")
    g.task("a", ["true"], image="i")
    g.task("a", ["true"], image="i")
    with pytest.raises(megaflow.InvalidGraph, match=r'task "a": name: also the name of tasks\[0\]'):
        g.build()
    g = megaflow.Graph("x")
    g.task("a", ["true"], image="i", after=["c"])
    g.task("b", ["true"], image="i", after=["a"])
    g.task("c", ["true"], image="i", after=["b"])
    g.task("d", ["true"], image="i", after=["c"])
    with pytest.raises(megaflow.InvalidGraph, match="dependency cycle a -> c -> b -> a"):
        g.build()


def test_empty_graph_and_bad_graph_fields():
    with pytest.raises(megaflow.InvalidGraph, match="no task"):
        megaflow.Graph("x").build()
    with pytest.raises(megaflow.InvalidGraph, match="id:"):
        megaflow.Graph("bad/id").build()
    with pytest.raises(megaflow.InvalidGraph, match="deadline"):
        megaflow.Graph("x", deadline=-5)


def test_wrong_types_are_invalid_graphs():
    g = megaflow.Graph("x")
    with pytest.raises(megaflow.InvalidGraph, match='task "a":'):
        g.task("a", ["true"], image="i", retries="2")
    with pytest.raises(megaflow.InvalidGraph, match='task "a":'):
        g.task("a", ["true"], image="i", env={"A": 1})
    with pytest.raises(megaflow.InvalidGraph, match="graph 'y'"):
        megaflow.Graph("y", priority="high")
