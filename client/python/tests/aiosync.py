"""A blocking adapter over megaflow.aio for the tests: the asyncio client
runs on an event loop in a thread of its own, and each call the test makes
is run there and waited for (with a deadline). Coroutines are awaited,
async iterators become iterators (closing one closes the async one), the
aio Sandbox's async context manager becomes a plain one. It lets the tests
written for the blocking client check the asyncio client's behaviour with
the same assertions."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import megaflow.aio

CALL_TIMEOUT = 30  # seconds any one adapted call may take


class AioApi:
    """Stands for the module megaflow in the tests: Client and Sandbox."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, fn: Any, *a: Any, **kw: Any) -> Any:
        async def invoke() -> Any:
            r = fn(*a, **kw)
            if inspect.isawaitable(r):
                r = await r
            return r
        return self.wrap(asyncio.run_coroutine_threadsafe(invoke(), self.loop).result(CALL_TIMEOUT))

    def wrap(self, v: Any) -> Any:
        if inspect.isasyncgen(v):
            return self._iterate(v)
        if isinstance(v, (megaflow.aio.Client, megaflow.aio.Sandbox)):
            return _Sync(self, v)
        return v

    def _iterate(self, agen: Any) -> Any:
        try:
            while True:
                try:
                    item = self.run(agen.__anext__)
                except StopAsyncIteration:
                    return
                yield item
        finally:
            self.run(agen.aclose)

    def Client(self, *a: Any, **kw: Any) -> Any:
        return self.run(megaflow.aio.Client, *a, **kw)

    def Sandbox(self, client: Any, *a: Any, **kw: Any) -> Any:
        return self.run(megaflow.aio.Sandbox, client._obj, *a, **kw)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class _Sync:
    def __init__(self, api: AioApi, obj: Any) -> None:
        self._api = api
        self._obj = obj

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._obj, name)
        if not callable(v):
            return v
        return lambda *a, **kw: self._api.run(v, *a, **kw)

    def __enter__(self) -> "_Sync":
        return self

    def __exit__(self, *exc: Any) -> None:
        if isinstance(self._obj, megaflow.aio.Client):
            self._api.run(self._obj.close)
        else:
            self._api.run(self._obj.__aexit__, *exc)
