"""megaflow.aio used as asyncio code uses it: async with on sandboxes,
async iteration of exec_stream and watch, and many calls in flight at once
from one event loop. (The behaviour tests of test_client.py and
test_sandbox.py run against megaflow.aio too, through aiosync.py.) Each
test's coroutine runs under asyncio.wait_for; nothing sleeps to
synchronize."""

import asyncio
import threading

import grpc
import pytest

import megaflow
import megaflow.aio
from fakehead import abort, fail, graph_row, not_leader, submitted
from megaflow._proto import sandbox_pb2 as sbx, service_pb2 as svc, types_pb2 as pb
from test_sandbox import Box

FAST = dict(backoff=(0.01, 0.05), timeout=5)
LIMIT = 20  # seconds any one test's coroutine may take


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, LIMIT))


def test_async_with_creates_execs_and_closes(heads):
    (h,) = heads(1)
    box = Box().install(h)

    async def main():
        async with megaflow.aio.Client([h.addr], tenant="team-a", **FAST) as c:
            async with c.sandbox(image="busybox", memory="1Gi") as sb:
                assert isinstance(sb, megaflow.aio.Sandbox) and sb.state == "READY"
                r = await sb.exec(["echo", "hi"], timeout=3)
                assert (r.exit_code, r.stdout, r.stderr) == (0, b"hello\nworld\n", b"warn\n")
                await sb.write_file("/w/a.txt", "x")
                assert await sb.read_file("/w/a.txt") == b"abcdef"
            assert sb.state == "CLOSED"
            # Awaited instead of entered: the caller closes it.
            box.state = sbx.SANDBOX_STATE_READY
            sb2 = await c.sandbox(image="busybox")
            assert [s.id for s in await c.list_sandboxes()] == ["sbx-a", "sbx-b"]
            await sb2.close()
            await sb2.close()  # idempotent
            return sb.id, sb2.id

    id1, id2 = run(main())
    assert [r.id for r in h.calls["CloseSandbox"]] == [id1, id2]
    assert h.calls["CreateSandbox"][0].spec.tenant == "team-a"


def test_arguments_are_checked_at_the_call(heads):
    (h,) = heads(1)
    Box().install(h)

    async def main():
        async with megaflow.aio.Client([h.addr], **FAST) as c:
            with pytest.raises(megaflow.InvalidArgument):
                c.sandbox(image="")  # not awaited: refused at the call
            sb = megaflow.aio.Sandbox(c, "sbx-abc")
            with pytest.raises(megaflow.InvalidArgument):
                sb.exec_stream([])
            with pytest.raises(megaflow.InvalidArgument):
                c.watch("g1", after=(1, -1))
            with pytest.raises(megaflow.InvalidArgument):
                await sb.exec("true", timeout=-1)

    run(main())
    assert not h.calls


def test_execs_run_concurrently_from_one_loop(heads):
    (h,) = heads(1)
    Box().install(h)
    n = 6  # below the fake head's 8 server threads
    barrier = threading.Barrier(n, timeout=10)

    def exec_(req, context):  # answers only once all n execs are in flight
        barrier.wait()
        yield sbx.SandboxExecResponse(stdout=req.argv[-1].encode())
        yield sbx.SandboxExecResponse(exit=sbx.SandboxExecExit(exit_code=0))

    h.handlers["Exec"] = exec_

    async def main():
        async with megaflow.aio.Client([h.addr], **FAST) as c:
            boxes = await asyncio.gather(*[c.sandbox(image="busybox") for _ in range(n)])
            rs = await asyncio.gather(*[sb.exec(["echo", str(i)]) for i, sb in enumerate(boxes)])
            await asyncio.gather(*[sb.close() for sb in boxes])
            return [r.text for r in rs], {sb.id for sb in boxes}

    texts, ids = run(main())
    assert texts == [str(i) for i in range(n)] and len(ids) == n
    assert h.count("Exec") == n and h.count("CloseSandbox") == n


def test_exec_stream_yields_as_it_comes_and_break_cancels(heads):
    (h,) = heads(1)
    Box().install(h)
    cancelled = threading.Event()
    go_on = threading.Event()

    def slow(req, context):
        context.add_callback(cancelled.set)
        yield sbx.SandboxExecResponse(stdout=b"first")
        go_on.wait(5)  # the client has seen "first" before anything else is sent
        yield sbx.SandboxExecResponse(stderr=b"second")
        cancelled.wait(5)

    h.handlers["Exec"] = slow

    async def main():
        async with megaflow.aio.Client([h.addr], **FAST) as c:
            sb = megaflow.aio.Sandbox(c, "sbx-abc")
            got = []
            stream = sb.exec_stream("sleep 100")
            async for item in stream:
                got.append(item)
                if len(got) == 1:
                    go_on.set()
                else:
                    break
            await stream.aclose()
            return got

    assert run(main()) == [("stdout", b"first"), ("stderr", b"second")]
    assert cancelled.wait(5)


def test_wait_follows_the_leader_and_many_waits_share_the_loop(heads):
    follower, leader = heads(2)
    follower.handlers["GetGraph"] = lambda r, c: abort(c, not_leader(leader.addr))
    leader.handlers["SubmitGraph"] = submitted
    leader.handlers["GetGraph"] = lambda r, c: graph_row(r.graph_id, pb.GRAPH_STATE_RUNNING, running=1) \
        if r.graph_id.endswith("slow") and not leader.count("Watch") else \
        graph_row(r.graph_id, pb.GRAPH_STATE_SUCCEEDED, succeeded=1)

    def watch(req, ctx):
        yield svc.WatchResponse(events=[pb.Event(index=11, seq=0, graph_id=req.graph_id,
                                                 graph_state=pb.GRAPH_STATE_SUCCEEDED)], applied_index=11)

    leader.handlers["Watch"] = watch

    async def main():
        async with megaflow.aio.Client([follower.addr], **FAST) as c:
            gs = await asyncio.gather(*[c.wait(gid, timeout=10) for gid in ("g1", "g2", "g-slow")])
            return [g.state for g in gs], c.heads

    states, hs = run(main())
    assert states == [pb.GRAPH_STATE_SUCCEEDED] * 3
    assert hs[0] == leader.addr


def test_dead_and_unavailable_heads_are_retried_until_the_deadline(heads, dead_addr):
    (h,) = heads(1)
    h.fail_next("GetGraph", *[fail(grpc.StatusCode.UNAVAILABLE, "no leader yet")] * 1000)

    async def main():
        async with megaflow.aio.Client([dead_addr, h.addr], backoff=(0.01, 0.05)) as c:
            with pytest.raises(megaflow.DeadlineExceeded, match="deadline passed"):
                await c.get_graph("g1", timeout=0.5)

    run(main())
    assert h.count("GetGraph") > 1
