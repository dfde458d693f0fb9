"""The log of a gateway process (``kswarm up`` and ``python -m gateway``): plain lines on stderr.

Configured before the gateway is built, because otherwise the MCP SDK's server configures the root
logger itself on construction (``logging.basicConfig`` with rich's handler and ``rich_tracebacks``): every
logged exception is then rendered as a box of syntax-highlighted source, in the gateway's event loop. When
the embedded Redis dies, each background loop (gate, hooks, job outcomes, task board) logs its failure,
and rendering those stalled the loop for seconds per record on a busy machine: ``/healthz`` and the Redis
watch could not run for ~20 s. Here a record costs one line, and an exception that only says a
dependency is unreachable (Redis down, a connection reset: the watch says so once, and heals it) is
written as its type and message, not as a traceback per retry; any other exception keeps its traceback.
"""

from __future__ import annotations

import logging
import sys

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

OUTAGES: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionError,
    TimeoutError,
)
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def is_outage(exc: BaseException | None) -> bool:
    """Is ``exc`` (or what it was raised from) only a dependency being unreachable?"""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OUTAGES):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class OneLineOutages(logging.Formatter):
    """Plain records; an outage's exception as ``(Type: message)`` on the record's own line."""

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not is_outage(exc):
            return super().format(record)
        brief = logging.makeLogRecord(record.__dict__)
        brief.exc_info, brief.exc_text = None, None
        line = super().format(brief)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{line} ({type(exc).__name__}: {reason})" if reason else f"{line} ({type(exc).__name__})"


def configure_logging(level: int = logging.INFO) -> None:
    """Plain lines on stderr for the root logger, unless it has a handler already (a host that
    configured logging itself, pytest's capture) -- then the MCP SDK's ``basicConfig`` is a no-op too."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineOutages(FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request of our own probes: noise
