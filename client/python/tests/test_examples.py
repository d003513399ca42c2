"""The Python examples (examples/python) run end to end, as a user runs them:
rollout_step.py against `megaflow up --runtime process` (its graph equal to
`megaflow demo graph`'s, its summary equal to `megaflow demo`'s but for the
times), agent_loop.py against `megaflow up --runtime docker` (skipped, saying
why, without a Docker Engine or a local sandbox image, as test_e2e's sandbox
test). The clusters are test_e2e's fixtures.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO
from test_e2e import cluster, docker_cluster, megaflow_bin, sandbox_image  # noqa: F401 (fixtures)

EXAMPLES = REPO / "examples" / "python"
RUN_TIMEOUT = 120  # seconds for one example run


@pytest.fixture(scope="session")
def demo_bin_dir(bin_dir):
    """bin_dir with the demo's programs (megaflow-agent, megaflow-model)
    beside megaflow, as `megaflow demo --runtime process` wants them: built
    into it when conftest built it; a MEGAFLOW_BIN_DIR must have them
    (`make build`)."""
    progs = ("megaflow-agent", "megaflow-model")
    if all(os.access(bin_dir / p, os.X_OK) for p in progs):
        return bin_dir
    if os.environ.get("MEGAFLOW_BIN_DIR"):
        pytest.fail(f"MEGAFLOW_BIN_DIR={bin_dir} lacks {progs}: run `make build`")
    subprocess.run([shutil.which("go") or "go", "build", "-o", str(bin_dir) + "/"] + [f"./cmd/{p}" for p in progs], cwd=REPO, check=True,
                   timeout=900)
    return bin_dir


def _example(name, *args):
    """Runs examples/python/<name> with Debian's Python; returns its result."""
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)


def _table(out):
    """The summary table of `megaflow demo` or rollout_step.py, from its
    "graph <id> <state>" line on, with the measured times blanked and runs
    of spaces made one (the times' widths set the columns')."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("graph "))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("wall time")) + 1
    return [" ".join(re.sub(r"(task time p50 / p99|wall time)\s+\S+( / \S+)?", r"\1 <t>", ln).split())
            for ln in lines[start:end]]


def test_rollout_step_graph_is_the_demos(demo_bin_dir, tmp_path):
    yaml = pytest.importorskip("yaml", reason="python3-yaml reads `megaflow demo graph`'s output")
    for rt, extra in (("docker", []), ("process", ["--work-root", str(tmp_path)])):
        args = ["--runtime", rt, "--instances", "12", "--seed", "7", "--speedup", "250"] + extra
        go = subprocess.run([str(demo_bin_dir / "megaflow"), "demo", "graph"] + args, capture_output=True, text=True, check=True,
                            timeout=60)
        bins = ["--bin-dir", str(demo_bin_dir)] if rt == "process" else []
        py = _example("rollout_step.py", "--print-graph", *args, *bins)
        assert py.returncode == 0, py.stderr
        assert json.loads(py.stdout) == yaml.safe_load(go.stdout), f"{rt}: the graphs differ"


def test_rollout_step_prints_the_demos_summary(demo_bin_dir, cluster, tmp_path):
    args = ["--instances", "2", "--seed", "10", "--speedup", "1000"]
    py = _example("rollout_step.py", "--heads", cluster.grpc, "--runtime", "process", "--bin-dir", str(demo_bin_dir),
                  "--work-root", str(tmp_path / "work"), *args)
    print(py.stdout)
    assert py.returncode == 0, py.stdout + py.stderr
    demo = subprocess.run([str(demo_bin_dir / "megaflow"), "demo", "--runtime", "process", "--data-dir",
                           str(tmp_path / "demo"), *args], capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    table = _table(py.stdout)
    assert table == _table(demo.stdout)
    # Seed 10's two rollouts need 2 attempts and 1: 6 tasks, 7 attempts.
    assert table[:2] == ["graph swegym-step-1 succeeded", "succeeded 6"], table
    assert "attempts 7 (1 task retried)" in table, table
    step = [ln for ln in py.stdout.splitlines() if ln.startswith("== the step: ")]
    assert step and step[0][len("== the step: "):] in demo.stdout


def test_rollout_step_bad_flags(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import rollout_step
    for args, want in ((["--instances", "0"], "--instances 0: want 1 to 2119"),
                       (["--speedup", "0.5"], "--speedup 0.5: want 1 (real time) to 10000"),
                       (["--runtime", "process", "--bin-dir", str(tmp_path)], "megaflow-agent")):
        with pytest.raises(SystemExit) as e:
            rollout_step.main(args + ["--print-graph"])
        assert e.value.code == 2 and want in capsys.readouterr().err, args


def test_agent_loop_steps_sandboxes(docker_cluster, sandbox_image):
    # Seed 8's first two instances, capped at one step: one attempt that
    # finishes; two attempts (the first breaks off before its step, the
    # retry hits the step limit).
    r = _example("agent_loop.py", "--heads", docker_cluster.grpc, "--image", sandbox_image, "--sandboxes", "2",
                 "--seed", "8", "--max-steps", "1")
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    eps = [ln.split() for ln in r.stdout.splitlines() if " attempt " in ln]
    assert sorted((e[0], e[2], e[3], e[6], e[7]) for e in eps) == [
        ("getmoto__moto-4950", "1", "1", "1.0", "finished"),
        ("python__mypy-9380", "1", "0", "0.0", "environment"),
        ("python__mypy-9380", "2", "1", "0.0", "step-limit")], r.stdout
    assert "2 rollouts, 3 episodes (1 broke off and were retried), 0 failed" in r.stdout
    assert "mean reward 0.500 (2 results)" in r.stdout
    assert re.search(r"execs 2 in ", r.stdout), r.stdout
