"""The proxy's upstream client (``gateway.llm.upstream``) against an upstream that misbehaves on purpose:
a raw socket server on loopback that refuses, hangs, cuts and answers, so each failure the proxy tells
apart (retry, 504, 502, a broken body) comes from a real connection, not a mock."""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

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


async def test_a_compressed_answer_reaches_the_key_scrubber_decompressed() -> None:
    """Attack: an upstream (or a box in front of it) gzips its answer although none was asked for.
    Passed through as it came, the real key inside would get past the scrubber, which reads bytes."""
    secret = b'{"leak":"sk-ant-real-key"}'

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(gzip.compress(secret), extra=b"content-encoding: gzip\r\n"))
            await writer.drain()

    async with upstream_at(handler) as (client, _):
        whole = await client.post("/v1/messages", HEADERS, BODY)
        assert await whole.read() == secret
        whole.close()
        streamed = await client.post("/v1/messages", HEADERS, BODY)
        assert b"".join([piece async for piece in streamed.chunks()]) == secret
        streamed.close()


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that nobody trusts, and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_an_upper_case_https_upstream_is_still_verified(self_signed: tuple[Path, Path]) -> None:
    """Attack: ``HTTPS://`` is a valid spelling of the scheme; it must not turn certificate checks off
    (the key goes out with the request)."""
    cert, key = self_signed
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        seen.append(head)
        writer.write(answer(b"{}"))
        await writer.drain()

    listening = await asyncio.start_server(lambda r, w: Server(handler).serve(r, w), "127.0.0.1", 0, ssl=tls)
    port = listening.sockets[0].getsockname()[1]
    try:
        for scheme in ("https", "HTTPS"):
            client = Upstream(LLMProxySettings(upstream_url=f"{scheme}://127.0.0.1:{port}", trust_env=False))
            async with client.running():
                with pytest.raises(UpstreamFailed):
                    await client.post("/v1/messages", {**HEADERS, "x-api-key": "sk-ant-real-key"}, BODY)
    finally:
        listening.close()
        await listening.wait_closed()
    assert seen == [], "no request reached a server whose certificate is not trusted"


async def test_the_environment_adds_no_login_to_the_upstream_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: with ``trust_env`` a ``.netrc`` entry for the upstream's host must not add an
    Authorization header beside the real key (or replace a bearer one)."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login mallory password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        server.heads.append(head)
        writer.write(answer(b"{}"))
        await writer.drain()

    server = Server(handler)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    client = Upstream(LLMProxySettings(upstream_url=f"http://127.0.0.1:{port}", trust_env=True))
    try:
        async with client.running():
            (await client.post("/v1/messages", HEADERS, BODY)).close()
    finally:
        listening.close()
        await listening.wait_closed()
    assert len(server.heads) == 1 and b"authorization" not in server.heads[0].lower()


async def test_header_bytes_come_back_as_sent() -> None:
    """A header value that is not UTF-8 keeps its bytes (latin-1, as the agent's answer encodes it
    again) instead of failing the answer once a slot is held."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"{}", extra=b"Request-Id: caf\xe9\r\n"))
        await writer.drain()

    async with upstream_at(handler) as (client, _):
        response = await client.post("/v1/messages", HEADERS, BODY)
        assert ("request-id", "caf\xe9") in response.header_items()
        assert "caf\xe9".encode("latin-1") == b"caf\xe9"
        response.close()
