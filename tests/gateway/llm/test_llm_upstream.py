"""The proxy's upstream client (``gateway.llm.upstream``) against an upstream that misbehaves on purpose:
a raw socket server on loopback that refuses, hangs, cuts and answers, so each failure the proxy tells
apart (retry, 504, 502, a broken body) comes from a real connection, not a mock."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from gateway.llm.config import LLMProxySettings
from gateway.llm.upstream import Upstream, UpstreamBroke, UpstreamFailed

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
BODY = b'{"model":"m","max_tokens":5,"messages":[]}'
HEADERS = {"content-type": "application/json", "user-agent": "the-agents-own/1.0"}
QUIET_S = 0.3  # the client's read timeout in these tests: how long an upstream may stay silent
EVENT_S = 30  # a failure detector for events that must come, not a timing


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


class Server:
    """A loopback server whose every connection is served by ``handler``; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def upstream_at(handler: Handler) -> AsyncIterator[tuple[Upstream, Server]]:
    server = Server(handler)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    settings = LLMProxySettings(upstream_url=f"http://127.0.0.1:{port}", timeout=QUIET_S, trust_env=False)
    client = Upstream(settings)
    try:
        async with client.running():
            yield client, server
    finally:
        listening.close()
        await listening.wait_closed()


def answer(body: bytes, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: application/json\r\n"
        + extra
        + b"content-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def test_an_answer_comes_back_whole_with_its_headers_and_the_connection_is_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            server.heads.append(head)
            writer.write(answer(b'{"echo":' + body + b"}", extra=b"Request-Id: req_1\r\n"))
            await writer.drain()

    async with upstream_at(handler) as (client, server):
        for _ in range(3):
            response = await client.post("/v1/messages?beta=true", HEADERS, BODY)
            assert response.status_code == 200
            assert await response.read() == b'{"echo":' + BODY + b"}"
            assert ("request-id", "req_1") in response.header_items(), "names in lower case"
            response.close()
    assert server.connections == 1, "a body read to its end returns the connection to the pool"
    head = server.heads[0].lower()
    assert head.startswith(b"post /v1/messages?beta=true http/1.1"), "the query string as given"
    assert b"user-agent: the-agents-own/1.0" in head, "the client's user agent, not aiohttp's"
    assert head.count(b"user-agent:") == 1


async def test_a_stream_arrives_chunk_by_chunk_and_one_left_unread_drops_its_connection() -> None:
    more = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        writer.write(chunk(b"event: one\ndata: 1"))
        await writer.drain()
        await more.wait()  # the next chunk only once the first was received: nothing is buffered
        writer.write(chunk(b"event: two\ndata: 2"))
        await writer.drain()
        await reader.read()  # until the client drops the connection

    async with upstream_at(handler) as (client, server):
        response = await client.post("/v1/messages", HEADERS, BODY)
        chunks = response.chunks()
        assert await asyncio.wait_for(anext(chunks), EVENT_S) == b"event: one\ndata: 1"
        more.set()
        assert await asyncio.wait_for(anext(chunks), EVENT_S) == b"event: two\ndata: 2"
        await chunks.aclose()
        response.close()  # the client left mid-stream
        again = await client.post("/v1/messages", HEADERS, BODY)
        again.close()
    assert server.connections == 2, "a connection with unread bytes is never handed to the next request"


@pytest.mark.parametrize("misbehaviour", ["refuses", "closes before answering", "resets before answering"])
async def test_failures_before_an_answer_may_be_retried(misbehaviour: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if misbehaviour == "resets before answering":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    if misbehaviour == "refuses":
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        client = Upstream(LLMProxySettings(upstream_url=f"http://127.0.0.1:{port}", trust_env=False))
        async with client.running():
            with pytest.raises(UpstreamFailed) as failed:
                await client.post("/v1/messages", HEADERS, BODY)
    else:
        async with upstream_at(handler) as (client, _):
            with pytest.raises(UpstreamFailed) as failed:
                await client.post("/v1/messages", HEADERS, BODY)
    assert failed.value.retry and not failed.value.timeout


async def test_an_upstream_silent_before_its_answer_times_out() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # never answers

    async with upstream_at(handler) as (client, _):
        with pytest.raises(UpstreamFailed) as failed:
            await client.post("/v1/messages", HEADERS, BODY)
    assert failed.value.timeout and not failed.value.retry


@pytest.mark.parametrize("misbehaviour", ["cut", "silent"])
async def test_a_body_that_breaks_part_way_is_told_apart(misbehaviour: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{")
        await writer.drain()
        if misbehaviour == "silent":
            await reader.read()

    async with upstream_at(handler) as (client, _):
        response = await client.post("/v1/messages", HEADERS, BODY)
        with pytest.raises(UpstreamBroke):
            await response.read()
        response.close()
        streamed = await client.post("/v1/messages", HEADERS, BODY)
        with pytest.raises(UpstreamBroke):
            async for _ in streamed.chunks():
                pass
        streamed.close()
