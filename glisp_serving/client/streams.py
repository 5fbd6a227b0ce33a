"""Gather over one long-lived ``GatherStream`` per server address (client side, on the client's loop).

A unary gRPC call costs the client and the server each about 0.2 ms of CPU in Python for call setup,
metadata, the deadline timer and the status; a message on an open stream about half of that (measured
on this project's 2-core machine: 165-240 us against 90-110 us per side). With one call per server
per hop that is about 2 ms of a 1024-seed batch's CPU. Requests carry a ``request_id`` and answers
are matched by it, so every batch in flight shares the stream.

The caller keeps the unary semantics: a deadline per request (``client.deadline_s``, measured from the
write), INVALID_ARGUMENT for a bad request (the server answers it with ``error_code`` and keeps the
stream open), and a stream that breaks fails its unanswered requests with UNAVAILABLE, which the
caller retries (Gather is a pure read) on a new stream, failing over like a unary call. A server
that does not offer streams (UNIMPLEMENTED) or has too many open (RESOURCE_EXHAUSTED) is asked by
unary calls instead.

Every request's future has its outcome observed, also when the request leaves without awaiting it (a
write that failed while the reader failed the stream, a cancelled request): asyncio would otherwise
print "Future exception was never retrieved" with a traceback for a failure the caller already handled.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from glisp_sampling import profile
from glisp_serving.wire import GATHER_RESPONSE, WireError, decode, with_request_id

CODES = {c.value[0]: c for c in grpc.StatusCode}
NO_STREAM = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.RESOURCE_EXHAUSTED)
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)  # final: a retry would not help


class StreamFailure(Exception):
    """A request on a stream got no answer (``code``: why; UNAVAILABLE when the stream broke).

    ``ask_unary``: the status may be gRPC's own rather than the server's (an INTERNAL error from gRPC's
    core, which under load can replace a refusal's UNAUTHENTICATED), so the caller asks the same server
    once by a unary call, whose status is the server's."""

    def __init__(self, code: grpc.StatusCode, details: str, ask_unary: bool = False) -> None:
        self.code, self.details, self.ask_unary = code, details, ask_unary
        super().__init__(f"{code.name}: {details}")


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


def _observe(fut: asyncio.Future) -> None:
    """Settle ``fut`` as seen: cancelled when nothing answered it, its exception retrieved when one did."""
    if not fut.done():
        fut.cancel()
    elif not fut.cancelled():
        fut.exception()


class GatherStream:
    """One open GatherStream call; :meth:`request` sends an encoded GatherRequest, returns the decoded answer."""

    def __init__(self, open_call: Any) -> None:
        self._call = open_call()  # no deadline: the stream lives as long as the client
        self._pending: dict[int, asyncio.Future] = {}
        self._write_lock = asyncio.Lock()
        self._next_id = 1
        self.failed: StreamFailure | None = None
        self._closing = False
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        failure = StreamFailure(grpc.StatusCode.UNAVAILABLE, "the server closed the stream")
        try:
            while True:
                raw = await self._call.read()
                if raw is grpc.aio.EOF:
                    break
                with profile.stage("client.decode"):
                    m = decode(GATHER_RESPONSE, raw)
                fut = self._pending.pop(m.get("request_id", 0), None)
                if fut is not None and not fut.done():
                    fut.set_result(m)
        except grpc.aio.AioRpcError as e:
            code = e.code() if e.code() in NO_STREAM + REFUSED else grpc.StatusCode.UNAVAILABLE  # else: retry them
            unsure = e.code() == grpc.StatusCode.INTERNAL  # maybe gRPC's core, not the server (seen in CI)
            failure = StreamFailure(code, f"stream ended with {e.code().name}: {e.details()}", ask_unary=unsure)
        except WireError as e:
            failure = StreamFailure(grpc.StatusCode.INTERNAL, f"undecodable answer on the stream: {e}")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closing or (task is not None and task.cancelling()):
                failure = StreamFailure(grpc.StatusCode.CANCELLED, "the client closed the stream")
            else:  # the call was cancelled from the server's side (a reload, a drain): another replica may answer
                failure = StreamFailure(grpc.StatusCode.UNAVAILABLE, "the server cancelled the stream")
        except Exception as e:  # noqa: BLE001 - a bug here fails the waiting requests, never the task unseen
            failure = StreamFailure(grpc.StatusCode.INTERNAL, f"the stream's reader failed: {e!r}")
        self.failed = failure
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(failure)
        self._pending.clear()

    async def request(self, raw: bytes, timeout: float) -> dict:
        """The decoded GatherResponse to ``raw``; StreamFailure, or TimeoutError after ``timeout`` s."""
        if self.failed is not None:
            raise self.failed
        rid = self._next_id
        self._next_id += 1
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending[rid] = fut
        expiry = loop.call_later(timeout, _expire, fut)  # cheaper than asyncio.wait_for (no extra task)
        try:
            async with self._write_lock:
                try:
                    await self._call.write(with_request_id(raw, rid))
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
                    if isinstance(e, grpc.aio.AioRpcError) and e.code() in REFUSED:
                        raise StreamFailure(e.code(), e.details() or "") from None
                    if not fut.done():  # the reader has not failed it yet
                        raise await self._write_failure(e) from None
            m = await fut
        finally:
            expiry.cancel()
            self._pending.pop(rid, None)
            _observe(fut)  # the reader may have failed it while this request was leaving another way
        code = m.get("error_code", 0)
        if code:
            raise StreamFailure(CODES.get(code, grpc.StatusCode.UNKNOWN), m.get("error", ""))
        return m

    async def _write_failure(self, e: Exception) -> StreamFailure:
        """Why a write failed. The server may have ended the call (a refused token) before the reader saw
        its status: the call's final status decides, so a refusal is not reported as a broken stream
        (UNAVAILABLE, which the caller would retry on another replica). gRPC may have replaced that status
        with its own INTERNAL "execute_batch" failure (seen under load): then the failure says ``ask_unary``
        and the caller asks the same server once by a unary call, whose status is the server's own."""
        try:
            code = await asyncio.wait_for(self._call.code(), 1.0)
            details = await self._call.details()
        except (TimeoutError, grpc.aio.AioRpcError):
            code, details = None, ""
        if code in NO_STREAM + REFUSED:
            return StreamFailure(code, details or "")
        return StreamFailure(grpc.StatusCode.UNAVAILABLE, f"stream broke while sending: {e}", ask_unary=True)

    async def aclose(self) -> None:
        self._closing = True
        self._call.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
