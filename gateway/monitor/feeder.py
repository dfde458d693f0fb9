"""The monitor's one loop: history from the event stream and from samples, claim windows, cost, Attention.

One gateway replica feeds at a time: it holds ``ks:mon:lease`` (renewed each pass; another replica takes
over ``lease_s`` after it stops), and every write is applied by a script that checks the lease first, the
event counters together with the event cursor, so an event is counted once.

- **Events** (``ks:events`` from the cursor on): messages per minute (all, per kind, per sender); jobs
  entering the queue, started and finished per pool; verdicts per task and pool (pass rates).
- **Spending** (``ks:llm:spent`` from its cursor on): each model call the proxy booked, to the tasks its
  agent held when it was booked (``gateway.monitor.cost``).
- **Samples** (every ``sample_s``): tokens and cost per agent and for the swarm (the increase of the LLM
  proxy's totals); queued and running
  jobs per pool (gauges); claim windows (opened and closed as the board changes: done, released,
  lapsed, taken); the gate's decisions (new entries of each PR's audit log).
- **Start**: ``ks:mon:started``, once: when this swarm's history begins (the charts' window).
- **Attention** (every ``attention_every_s``): recomputed; when it changed, one ``type: attention``
  event on ``ks:events``, so every open page (SSE) refreshes; items that are new go to the operator's
  alert targets (``gateway.monitor.alerts``: sent from their own tasks, so a slow receiver never holds
  this loop; under the lease, so one replica sends).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import time
from typing import Any

from gateway import keys as gateway_keys
from gateway.cancellation import nap, rounds
from gateway.context import GatewayContext
from gateway.llm.books import SPENT
from gateway.monitor import keys
from gateway.monitor.alerts import AlertDispatcher, AlertMetrics
from gateway.monitor.attention import AttentionBuilder
from gateway.monitor.cost import NANO, UNATTRIBUTED, cost_field, tokens_series, usd_series
from gateway.monitor.kinds import event_agent, event_kind
from gateway.monitor.models import ClaimWindow
from gateway.monitor.series import Batch, SeriesStore
from gateway.monitor.settings import MonitorSettings
from gateway.principals import PrincipalKind
from gateway.services import FORGE, JOB_SERVICE, LLM_USAGE, REVIEW_GATE, TASK_BOARD

log = logging.getLogger("kswarm.monitor")

EVENT_BATCH = 1000
FORGE_EVENTS = f"{gateway_keys.PREFIX}forge:events"  # gateway/forge/keys.py: EVENTS (read, never consumed)
TERMINAL = {"succeeded", "failed", "error", "timeout", "cancelled"}
GATE_HORIZON_S = 3600.0  # a closed PR's decisions are watched this long after it closed


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class MonitorFeeder:
    def __init__(
        self, ctx: GatewayContext, settings: MonitorSettings, series: SeriesStore, attention: AttentionBuilder
    ) -> None:
        self.ctx = ctx
        self.settings = settings
        self.series = series
        self.owner = owner_id()
        self.attention = attention
        self.alerts = AlertDispatcher(
            ctx.redis,
            settings.alerts,
            ui_base=ctx.settings.url(),  # the public URL when set (KSWARM_GATEWAY_PUBLIC_URL)
            swarm=ctx.settings.swarm,
            metrics=AlertMetrics(ctx.metrics.registry),
        )
        self.kinds: dict[str, PrincipalKind | None] = {}
        self.next_sample = 0.0
        self.next_attention = 0.0
        self.started = False

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            for _ in rounds():
                try:
                    await self.once()
                except asyncio.CancelledError:
                    raise
                except Exception:  # keep feeding: a Redis hiccup or a broken source must not end history
                    log.exception("monitor feeder pass failed")
                await nap(min(1.0, self.settings.attention_every_s))
        finally:
            with contextlib.suppress(Exception):
                await self.alerts.aclose()
            with contextlib.suppress(Exception):
                await self.series.release_lease(self.owner)

    async def once(self, force: bool = False) -> bool:
        """One pass if this replica holds (or takes) the lease; False when another one feeds."""
        if not await self.series.take_lease(self.owner, self.settings.lease_s):
            return False
        if not self.started:
            await self.mark_start()
        while await self.count_events() >= EVENT_BATCH:
            pass
        while await self.record_pushes() >= EVENT_BATCH:
            pass
        while await self.book_spending() >= EVENT_BATCH:
            pass
        now = time.time()
        if force or now >= self.next_sample:
            self.next_sample = now + self.settings.sample_s
            await self.sample(now)
        if force or now >= self.next_attention:
            self.next_attention = now + self.settings.attention_every_s
            await self.announce_attention()
        return True

    async def mark_start(self) -> None:
        """The swarm's age (charts of a young swarm span its lifetime): the first feed, or the oldest
        event on the stream when history came before the monitor; set once (NX), never moved."""
        first = await self.ctx.redis.xrange(gateway_keys.EVENTS, "-", "+", 1)
        born = min([time.time(), *(float(fields.get("ts") or 0) or time.time() for _, fields in first)])
        await self.ctx.redis.set(keys.STARTED, repr(born), nx=True)
        self.started = True

    # -- events -----------------------------------------------------------------------------

    async def sender_kind(self, name: str) -> PrincipalKind | None:
        if name not in self.kinds:
            principal = await self.ctx.principals.get(name) if name else None
            self.kinds[name] = principal.kind if principal else None
        return self.kinds[name]

    async def count_events(self) -> int:
        cursor = await self.series.cursor()
        start = f"({cursor}" if cursor else "-"
        rows = await self.ctx.redis.xrange(gateway_keys.EVENTS, start, "+", EVENT_BATCH)
        if not rows:
            return 0
        batch = Batch()
        oldest = time.time() - self.series.retention_s
        for _, fields in rows:
            ts = float(fields.get("ts") or 0) or time.time()
            if ts >= oldest:
                await self.count(batch, fields, ts)
        await self.series.apply(batch, self.owner, cursor=str(rows[-1][0]))
        return len(rows)

    async def count(self, batch: Batch, fields: dict[str, str], ts: float) -> None:
        kind = fields.get("type", "message")
        if kind == "message":
            sender = fields.get("sender", "")
            batch.incr("messages", ts)
            batch.incr(f"messages:kind:{event_kind(fields, await self.sender_kind(sender))}", ts)
            if sender:
                batch.incr(f"messages:agent:{sender}", ts)
        elif kind == "job":
            pool, state, task = fields.get("pool", "?"), fields.get("state", ""), fields.get("task", "?")
            if state == "queued":
                batch.incr(f"jobs:submitted:{pool}", ts)
            elif state == "running":
                batch.incr(f"jobs:started:{pool}", ts)
            elif state in TERMINAL:
                batch.incr(f"jobs:finished:{pool}", ts)
                batch.incr(f"jobs:{state}:{pool}", ts)
                verdict = fields.get("verdict", "")
                if verdict:
                    for scope in (f"task:{task}", f"pool:{pool}"):
                        batch.incr(f"verdicts:{scope}:total", ts)
                        if verdict == "pass":
                            batch.incr(f"verdicts:{scope}:pass", ts)
            if event_agent(fields):
                batch.incr(f"jobs:agent:{event_agent(fields)}", ts)

    async def record_pushes(self) -> int:
        """Each branch's heads, from the forge's push events (a PR's page shows one diff per push)."""
        cursor = await self.ctx.redis.get(keys.FORGE_CURSOR)
        rows = await self.ctx.redis.xrange(FORGE_EVENTS, f"({cursor}" if cursor else "-", "+", EVENT_BATCH)
        if not rows:
            return 0
        async with self.ctx.redis.pipeline(transaction=True) as pipe:
            for _, fields in rows:
                ref = fields.get("ref", "")
                if fields.get("type") != "push" or not ref.startswith("refs/heads/") or not fields.get("sha"):
                    continue
                key = keys.heads(fields.get("repo", ""), ref.removeprefix("refs/heads/"))
                head = {
                    "sha": fields["sha"],
                    "old": fields.get("old", ""),
                    "ts": float(fields.get("ts") or 0),
                    "actor": fields.get("actor", ""),
                }
                pipe.rpush(key, json.dumps(head))
                pipe.ltrim(key, -keys.HEADS_KEPT, -1)
            pipe.set(keys.FORGE_CURSOR, str(rows[-1][0]))
            if await self.ctx.redis.get(keys.LEASE) == self.owner:
                await pipe.execute()
        return len(rows)

    # -- samples ----------------------------------------------------------------------------

    async def sample(self, now: float) -> None:
        await self.sample_claims(now)
        batch = Batch()
        await self.sample_usage(batch, now)
        await self.sample_pools(batch, now)
        await self.sample_gate(batch, now)
        if batch:
            await self.series.apply(batch, self.owner)

    async def sample_usage(self, batch: Batch, now: float) -> None:
        store = self.ctx.services.find(LLM_USAGE)
        if store is None:
            return
        usage = await store.all()
        last = await self.ctx.redis.hgetall(keys.USAGE_LAST)
        # The monitor's first sample baselines every agent: what was spent before it watched is not
        # attributed. An agent it first sees later has spent everything since a sample that saw it with
        # nothing (the proxy lists an agent from its first booked call): its whole usage is new.
        watching = last.get(keys.USAGE_WATCHING) is not None
        batch.hset(keys.USAGE_LAST, keys.USAGE_WATCHING, repr(now))
        swarm_tokens, swarm_nusd = 0, 0
        for agent, u in usage.items():
            tokens, nusd = int(u.total_tokens), round(u.cost_usd * NANO)
            before_t, before_n = last.get(f"{agent}:tokens"), last.get(f"{agent}:nusd")
            batch.hset(keys.USAGE_LAST, f"{agent}:tokens", str(tokens))
            batch.hset(keys.USAGE_LAST, f"{agent}:nusd", str(nusd))
            if before_t is None or before_n is None:
                if not watching:
                    continue  # the monitor's first sample: the usage before it watched is not attributed
                before_t = before_n = "0"
            d_tokens, d_nusd = tokens - int(before_t), nusd - int(before_n)
            if d_tokens < 0 or d_nusd < 0:
                continue  # the agent's usage was reset: re-baselined, nothing booked
            if not d_tokens and not d_nusd:
                continue
            swarm_tokens += d_tokens
            swarm_nusd += d_nusd
            batch.incr(f"tokens:agent:{agent}", now, d_tokens)
            batch.incr(f"cost:agent:{agent}", now, d_nusd / NANO)
        batch.incr("tokens:swarm", now, swarm_tokens)
        batch.incr("cost:swarm", now, swarm_nusd / NANO)

    async def book_spending(self) -> int:
        """Book the proxy's booked calls (``ks:llm:spent``) to the tasks their agent held when each was
        booked (split evenly over several; ``-`` when none), at the call's own time: exact, however
        short the claim. The cursor moves in the same transaction as the bookings."""
        cursor = await self.ctx.redis.hget(keys.COST, keys.SPENT_CURSOR)
        rows = await self.ctx.redis.xrange(SPENT, f"({cursor}" if cursor else "-", "+", EVENT_BATCH)
        if not rows:
            return 0
        if cursor and not await self.ctx.redis.xrange(SPENT, cursor, cursor):
            # The cursor's entry was trimmed away unread (the feeder fell more than the stream's cap
            # behind): what lay between is not attributed to any task. Said once per gap.
            log.warning("cost per task: spending before %s was trimmed before it was booked", rows[0][0])
        batch = Batch()
        calls: dict[str, dict[str, float]] = {}  # per (task, agent) key: member -> the call's time
        oldest = time.time() - self.series.retention_s
        for entry_id, fields in rows:
            agent, ts = fields.get("agent", ""), float(fields.get("ts") or 0)
            tokens, nusd = int(fields.get("tokens") or 0), int(fields.get("nusd") or 0)
            if not agent:
                continue
            tasks = [t for t in fields.get("tasks", "").split(",") if t] or [UNATTRIBUTED]
            for i, task in enumerate(tasks):
                share_t = tokens // len(tasks) + (tokens % len(tasks) if i == 0 else 0)
                share_n = nusd // len(tasks) + (nusd % len(tasks) if i == 0 else 0)
                batch.hincr(keys.COST, cost_field(task, agent, "tokens"), share_t)
                batch.hincr(keys.COST, cost_field(task, agent, "nusd"), share_n)
                if ts >= oldest:  # the all-time totals take everything; the rest only their retention
                    batch.incr(tokens_series(task, agent), ts, share_t)
                    batch.incr(usd_series(task, agent), ts, share_n / NANO)
                    calls.setdefault(keys.spent(task, agent), {})[f"{entry_id} {share_t} {share_n}"] = ts
        last = str(rows[-1][0])
        batch.hset(keys.COST, keys.SPENT_CURSOR, last)
        if not await self.series.apply(batch, self.owner):
            return 0  # another replica feeds now
        # Each call by its own time, for exact windows (a dataset record's): idempotent (the member
        # names the entry), so a pass repeated after a crash here books nothing twice.
        async with self.ctx.redis.pipeline(transaction=False) as pipe:
            for key, members in calls.items():
                pipe.zadd(key, members)
                pipe.zremrangebyscore(key, "-inf", oldest)
                pipe.expire(key, int(self.series.retention_s) + 86_400)
            await pipe.execute()
        # Booked: what lies before the cursor's entry is no longer needed (the cursor's own is kept, to
        # tell a trimmed gap from a booked one).
        await self.ctx.redis.xtrim(SPENT, minid=last)
        return len(rows)

    async def sample_pools(self, batch: Batch, now: float) -> None:
        svc = self.ctx.services.find(JOB_SERVICE)
        if svc is None:
            return
        for pool in svc.pools.values():
            depth = await svc.queue.depth(pool.name)
            batch.gauge(f"jobs:queued:{pool.name}", now, float(depth["queued"]))
            batch.gauge(f"jobs:running:{pool.name}", now, float(depth["running"]))

    async def sample_gate(self, batch: Batch, now: float) -> None:
        """Count the gate's new decisions: of open PRs, and of PRs closed within ``GATE_HORIZON_S`` (a PR
        opened and merged between two samples is counted too; its merge is a kernel accepted). A PR is
        watched (``ks:mon:audit-seen``: the last decision counted) until it has been closed that long,
        so a decision is counted once."""
        forge, gate = self.ctx.services.find(FORGE), self.ctx.services.find(REVIEW_GATE)
        if forge is None or gate is None:
            return
        seen = await self.ctx.redis.hgetall(keys.AUDIT_SEEN)
        current: dict[str, tuple[str, int]] = {}  # open, or closed within the horizon
        for info in await forge.list_repos():
            for pr in await forge.list_prs(info.org, info.name, "all"):
                closed = pr.closed_at or pr.merged_at or 0.0
                if pr.state == "open" or closed >= now - GATE_HORIZON_S:
                    current[f"{pr.full_name}#{pr.number}"] = (pr.full_name, pr.number)
        watch = dict(current)
        for name in seen:
            full, _, digits = str(name).rpartition("#")
            if full and digits.isdigit():
                watch.setdefault(str(name), (full, int(digits)))
        for name, (repo, number) in watch.items():
            last_seen = float(seen.get(name) or 0)
            newest = last_seen
            for entry in await gate.audit(repo, number, 100):
                ts = float(entry.get("ts") or 0)
                if ts > last_seen:
                    batch.incr(f"gate:{entry.get('action', 'decided')}", ts)
                    newest = max(newest, ts)
            if name not in current:
                batch.hdel(keys.AUDIT_SEEN, name)  # closed long enough: its last decisions are counted now
            elif newest != last_seen or name not in seen:
                batch.hset(keys.AUDIT_SEEN, name, repr(newest))

    async def sample_claims(self, now: float) -> dict[str, list[str]]:
        """Open and close claim windows as the board changed; returns agent -> tasks held now."""
        svc = self.ctx.services.find(TASK_BOARD)
        if svc is None:
            return {}
        claimed = {t.id: t for t in await svc.board.list("claimed")}
        held: dict[str, list[str]] = {}
        for task in claimed.values():
            if task.holder:
                held.setdefault(task.holder, []).append(task.id)
        opened = await self.ctx.redis.hgetall(keys.CLAIMS_OPEN)
        closes: list[ClaimWindow] = []
        opens: dict[str, ClaimWindow] = {}
        for task_id, raw in opened.items():
            try:
                window = ClaimWindow.model_validate_json(raw)
            except ValueError:
                continue
            now_task = claimed.get(str(task_id))
            if (
                now_task is not None
                and now_task.holder == window.agent
                and (now_task.claimed_at is None or abs((now_task.claimed_at or 0) - window.since) < 1)
            ):
                if now_task.expires_at != window.expires_at:
                    opens[str(task_id)] = window.model_copy(update={"expires_at": now_task.expires_at})
                continue
            closes.append(await self._closed(window, now_task is not None, now))
        for task in claimed.values():
            if task.holder and (task.id not in opened or any(c.task == task.id for c in closes)):
                opens[task.id] = ClaimWindow(
                    task=task.id, agent=task.holder, since=task.claimed_at or now, expires_at=task.expires_at
                )
        if closes or opens:
            async with self.ctx.redis.pipeline(transaction=True) as pipe:
                for window in closes:
                    pipe.xadd(
                        keys.CLAIMS,
                        {"json": window.model_dump_json()},
                        maxlen=keys.CLAIMS_MAXLEN,
                        approximate=True,
                    )
                    pipe.hdel(keys.CLAIMS_OPEN, window.task)
                for task_id, window in opens.items():
                    pipe.hset(keys.CLAIMS_OPEN, task_id, window.model_dump_json())
                await pipe.execute()
        return held

    async def _closed(self, window: ClaimWindow, claimed_again: bool, now: float) -> ClaimWindow:
        svc = self.ctx.services.find(TASK_BOARD)
        task = None
        if svc is not None:
            with contextlib.suppress(Exception):
                task = await svc.board.get(window.task)
        if task is not None and task.state == "done":
            return window.model_copy(update={"until": task.done_at or now, "how": "done"})
        if window.expires_at is not None and now >= window.expires_at - 1:
            return window.model_copy(update={"until": window.expires_at, "how": "lapsed"})
        return window.model_copy(update={"until": now, "how": "taken" if claimed_again else "released"})

    # -- attention --------------------------------------------------------------------------

    async def announce_attention(self) -> None:
        report = await self.attention.report()
        try:
            await self.alerts.notify(report, self.owner)
        except Exception:  # a Redis hiccup here must not keep the pages from refreshing
            log.exception("alerts: new Attention items could not be handed to the targets")
        digest = hashlib.sha256(
            json.dumps([(i.key, i.severity, i.title) for i in report.items]).encode()
        ).hexdigest()[:16]
        if await self.ctx.redis.get(keys.ATTENTION) == digest:
            return
        await self.ctx.redis.set(keys.ATTENTION, digest)
        fields: dict[Any, Any] = {"type": "attention", "count": str(len(report.items)), "digest": digest}
        fields["ts"] = repr(time.time())
        await self.ctx.redis.xadd(
            gateway_keys.EVENTS, fields, maxlen=self.ctx.settings.events_maxlen, approximate=True
        )
