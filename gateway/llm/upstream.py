"""The LLM proxy's upstream client: one aiohttp session to the configured upstream, kept warm.

aiohttp rather than httpx: on the proxy's path its request costs about a third of httpx's CPU (its
parser is C; httpx's transport runs through httpcore, h11 and anyio in Python), measured in
docs/performance.md ("LLM proxy"). What the proxy needs of a client is small, and is all here: a POST
whose failure says whether retrying may help, an answer's status and headers, its body whole or chunk
by chunk as it comes, and a close that returns the connection to the pool, or drops it when the body
was not read to its end.

Timeouts are httpx's: ``connect_timeout`` to resolve and connect, ``timeout`` for the longest gap
between bytes (the whole answer may take longer). ``trust_env`` honours HTTP(S)_PROXY / NO_PROXY and
SSL_CERT_FILE / SSL_CERT_DIR, read once at start-up: aiohttp's own ``trust_env`` looks the proxy up
and reads ``~/.netrc`` on every request (as much CPU as the request itself), and would add a netrc
login to the upstream call. Certificates are otherwise certifi's, as before, and always verified. A
compressed answer is decompressed (the proxy asks for none): the key scrubber must see the bytes.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiohttp
import certifi
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from gateway.llm.config import LLMProxySettings

KEEPALIVE_S = 5.0  # an idle pooled connection is closed after this (httpx's default too)


class UpstreamFailed(Exception):
    """No answer from the upstream. ``retry``: a connection failure that another attempt may not
    meet (refused, reset, closed before answering, a connect timeout); ``timeout``: the upstream went
    silent past the read timeout."""

    def __init__(self, reason: str, *, retry: bool = False, timeout: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry
        self.timeout = timeout


class UpstreamBroke(Exception):
    """An answer's body failed part-way (reset, cut, silent past the read timeout)."""


def _failure(exc: BaseException) -> UpstreamFailed:
    name = type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamFailed(name, retry=True)
    if isinstance(exc, aiohttp.ServerTimeoutError | TimeoutError):
        return UpstreamFailed(name, timeout=True)
    if isinstance(exc, aiohttp.ClientOSError | aiohttp.ServerDisconnectedError):
        return UpstreamFailed(name, retry=True)
    return UpstreamFailed(name)


class UpstreamResponse:
    """An answer whose headers are read; its body is read by ``read`` or ``chunks``, then ``close``."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers: Mapping[str, str] = response.headers  # case-insensitive

    def header_items(self) -> list[tuple[str, str]]:
        """Every header as sent, names in lower case, bytes as latin-1 (what the agent's answer is
        encoded in again: a value aiohttp decoded as UTF-8 could not be)."""
        return [
            (name.decode("latin-1").lower(), value.decode("latin-1"))
            for name, value in self._response.raw_headers
        ]

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamBroke(type(exc).__name__) from exc

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamBroke(type(exc).__name__) from exc

    def close(self) -> None:
        """Back to the pool when the body was read to its end; else the connection is closed."""
        self._response.release()


class Upstream:
    """The session; ``running`` opens it for the app's lifetime (it belongs to the running loop)."""

    def __init__(self, settings: LLMProxySettings) -> None:
        self.settings = settings
        self.base = settings.upstream_url.rstrip("/")
        self.session: aiohttp.ClientSession | None = None
        self.proxy: URL | None = None
        self.proxy_auth: aiohttp.BasicAuth | None = None

    def tls(self) -> ssl.SSLContext:
        cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
        if self.settings.trust_env and (cafile or capath):
            return ssl.create_default_context(cafile=cafile, capath=capath)
        return ssl.create_default_context(cafile=certifi.where())

    def env_proxy(self) -> None:
        """The proxy HTTP(S)_PROXY names for the upstream, unless NO_PROXY exempts it."""
        try:
            self.proxy, self.proxy_auth = get_env_proxy_for_url(URL(self.base))
        except LookupError:
            self.proxy = self.proxy_auth = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        if self.settings.trust_env:
            self.env_proxy()
        # ``ssl`` is used for https only; never False, which aiohttp takes as "do not verify".
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S, ssl=self.tls())
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.settings.connect_timeout,  # DNS included (sock_connect is the socket's alone)
            sock_connect=self.settings.connect_timeout,
            sock_read=self.settings.timeout,
        )
        async with aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            trust_env=False,  # read once above
            skip_auto_headers=("User-Agent",),  # the client's own, when it sent one
        ) as session:
            self.session = session
            try:
                yield
            finally:
                self.session = None

    async def post(self, path: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        """POST ``body`` to ``path`` (with its query string); the answer with its headers read, or
        ``UpstreamFailed``."""
        assert self.session is not None, "the LLM proxy's lifespan is not running"
        try:
            response = await self.session.post(
                URL(self.base + path, encoded=True),
                data=body,
                headers=dict(headers),
                allow_redirects=False,
                proxy=self.proxy,
                proxy_auth=self.proxy_auth,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _failure(exc) from exc
        return UpstreamResponse(response)
