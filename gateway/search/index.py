"""The SQLite FTS5 index of messages, used from the gateway's event loop through one worker thread.

One row per message (``UNIQUE(channel, msg_id)``: feeding twice stores it once), an external-content FTS5
table over its text, sender and channel, and ``meta`` holding the event-stream cursor, written in the
same transaction as the rows it covers. WAL mode: reads do not wait for the feeder.

DM privacy is part of every query: a DM row (``dm_a``/``dm_b`` set) is returned only when the caller is
one of the two or an operator — the rule of ``gateway.chat.ChatService.can_read`` — and before paging,
so totals and pages never count what the caller may not see.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from markupsafe import escape

from gateway.chat import dm_members
from gateway.errors import GatewayError
from gateway.principals import Principal, PrincipalKind
from gateway.search.query import ParsedQuery

T = TypeVar("T")
START, END = "\x02", "\x03"
SCHEMA = """
PRAGMA journal_mode = WAL;
-- No fsync per commit (WAL keeps the file whole): a power loss can lose the last batches, which
-- the cursor, written in their transaction, makes the feeder index again.
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS messages (
  rowid INTEGER PRIMARY KEY,
  channel TEXT NOT NULL,
  msg_id TEXT NOT NULL,
  sender TEXT NOT NULL,
  ts REAL NOT NULL,
  kind TEXT NOT NULL,
  activity TEXT NOT NULL,
  thread TEXT,
  mentions TEXT NOT NULL DEFAULT '',
  dm_a TEXT,
  dm_b TEXT,
  text TEXT NOT NULL,
  UNIQUE (channel, msg_id)
);
CREATE INDEX IF NOT EXISTS messages_ts ON messages (ts);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
  text, sender, channel, content='messages', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
  INSERT INTO messages_fts(rowid, text, sender, channel)
  VALUES (new.rowid, new.text, new.sender, new.channel);
END;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Row:
    channel: str
    msg_id: str
    sender: str
    ts: float
    kind: str
    activity: str
    thread: str | None
    mentions: str
    text: str


@dataclass
class Hit:
    id: str
    channel: str
    sender: str
    ts: float
    kind: str
    activity: str
    thread: str | None
    mentions: list[str]
    text: str
    snippet_html: str
    rank: float


def snippet_html(raw: str) -> str:
    """FTS5's snippet (matches between START/END marks) as escaped HTML with ``<mark>``."""
    return str(escape(raw)).replace(START, "<mark>").replace(END, "</mark>")


class SearchIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kswarm-search")
        self._local = threading.local()
        self._closing = False

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=30)
            db.executescript(SCHEMA)
            self._local.db = db
        return db

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._unless_closing, fn, *args)

    def _unless_closing(self, fn: Any, *args: Any) -> Any:
        if self._closing:  # queued behind a close: not run (the feeder indexes it again at the next start)
            raise GatewayError("the search index is closing", 503, headers={"Retry-After": "1"})
        return fn(*args)

    async def close(self) -> None:
        """Let the call in flight end, skip the queued ones, then close the connection on its own
        thread -- all off the event loop. A stopping gateway never waits on a queue of index writes:
        the feeder stores its cursor with what it indexed, so what was skipped is indexed again at the
        next start."""

        def shut() -> None:
            db = getattr(self._local, "db", None)
            if db is not None:
                db.close()
                self._local.db = None

        self._closing = True
        await asyncio.get_running_loop().run_in_executor(self._pool, shut)
        await asyncio.to_thread(self._pool.shutdown, wait=True)

    # -- writing ----------------------------------------------------------------------------

    def _add(self, rows: list[Row], cursor: str | None) -> int:
        db = self._db()
        added = 0
        with db:
            for r in rows:
                peers = dm_members(r.channel)
                cur = db.execute(
                    "INSERT OR IGNORE INTO messages (channel, msg_id, sender, ts, kind, activity, thread, "
                    "mentions, dm_a, dm_b, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        r.channel,
                        r.msg_id,
                        r.sender,
                        r.ts,
                        r.kind,
                        r.activity,
                        r.thread,
                        r.mentions,
                        peers[0] if peers else None,
                        peers[1] if peers else None,
                        r.text.replace(START, "").replace(END, ""),  # our snippet marks, never the author's
                    ),
                )
                added += cur.rowcount
            if cursor is not None:
                db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('cursor', ?)", (cursor,))
        return added

    async def add(self, rows: list[Row], cursor: str | None = None) -> int:
        """Store ``rows`` (ignoring ones already there) and, in the same transaction, the cursor."""
        return int(await self._call(self._add, rows, cursor))

    def _meta(self, key: str) -> str | None:
        row = self._db().execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return row[0] if row else None

    async def cursor(self) -> str | None:
        return await self._call(self._meta, "cursor")

    async def count(self) -> int:
        return int(
            await self._call(lambda: self._db().execute("SELECT count(*) FROM messages").fetchone()[0])
        )

    # -- searching --------------------------------------------------------------------------

    def _search(
        self, principal: Principal, query: ParsedQuery, limit: int, offset: int, order: str
    ) -> tuple[int, list[Hit]]:
        where = ["messages_fts MATCH ?"]
        args: list[Any] = [query.fts]
        if principal.kind != PrincipalKind.operator:
            where.append("(m.dm_a IS NULL OR m.dm_a = ? OR m.dm_b = ?)")
            args += [principal.name, principal.name]
        for column, value in (("channel", query.channel), ("sender", query.sender), ("activity", query.kind)):
            if value:
                where.append(f"m.{column} = ?")
                args.append(value)
        sql_where = " AND ".join(where)
        join = "FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid"
        db = self._db()
        total = db.execute(f"SELECT count(*) {join} WHERE {sql_where}", args).fetchone()[0]
        ordering = "rank, m.ts DESC" if order == "rank" else "m.ts DESC"
        rows = db.execute(
            "SELECT m.msg_id, m.channel, m.sender, m.ts, m.kind, m.activity, m.thread, m.mentions, m.text, "
            f"snippet(messages_fts, 0, '{START}', '{END}', '…', 32), "
            f"bm25(messages_fts, 1.0, 0.5, 0.2) AS rank {join} WHERE {sql_where} "
            f"ORDER BY {ordering} LIMIT ? OFFSET ?",
            [*args, limit, offset],
        ).fetchall()
        hits = [
            Hit(
                id=r[0],
                channel=r[1],
                sender=r[2],
                ts=r[3],
                kind=r[4],
                activity=r[5],
                thread=r[6],
                mentions=[m for m in (r[7] or "").split(",") if m],
                text=r[8],
                snippet_html=snippet_html(r[9] or ""),
                rank=float(r[10]),
            )
            for r in rows
        ]
        return int(total), hits

    async def search(
        self, principal: Principal, query: ParsedQuery, limit: int = 20, offset: int = 0, order: str = "rank"
    ) -> tuple[int, list[Hit]]:
        """(how many match in all, this page) of what ``principal`` may read."""
        return await self._call(self._search, principal, query, limit, offset, order)
