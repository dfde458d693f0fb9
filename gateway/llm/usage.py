"""LLM usage accounting per agent in Redis, and budgets enforced by reservations (the books' layout:
``gateway.llm.books``).

A request reserves its worst-case cost in one script (``reserve``): the script drops expired
reservations, then admits the request only if no hold stops the agent and usage + live reservations
+ this request fit in every budget that applies (``check``: the same without reserving, for unbilled
calls). ``settle`` replaces the reservation by the real usage in one script, and sets a hold on the
agent when that usage is more than the reservation (docs/llm-proxy.md, "Holds"). With budget leases
(``gateway.llm.leases``), an agent's next requests through the same replica are admitted from a lease
held in Redis beside the reservations, without the script.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from gateway import keys as gateway_keys
from gateway.auth_changes import acks_of, announced_change
from gateway.errors import BooksBusy
from gateway.llm.books import (
    BUDGETS,
    DAY_KEEP_S,
    DRAIN_S,
    LEASED,
    RESERVATION_DATA,
    RESERVATIONS,
    RESERVED,
    SPENT,
    SPENT_MAXLEN,
    SWARM_EXHAUSTED,
    TOKEN_FIELDS,
    USAGE_AGENTS,
    USAGE_SWARM,
    Reservation,
    Usage,
    agent_limits,
    agent_usage,
    as_int,
    budget_key,
    day_key,
    exhausted_key,
    hold_key,
    input_estimate,
    models_key,
    nusd_of,
    swarm_limits,
    usage_key,
    utc_day,
)
from gateway.llm.budget_scripts import RESERVE_SCRIPT, SETTLE_SCRIPT
from gateway.llm.config import LLMProxySettings
from gateway.llm.leases import BudgetLeases, Lease
from gateway.llm.model_names import booked_model
from gateway.llm.refusals import NANO, BudgetRefusal, Hold
from gateway.llm.usage_models import AgentUsage, BudgetUpdate
from gateway.redis_facade import StrRedis, Value

log = logging.getLogger("kswarm.llm_usage")


class UsageStore:
    """Usage counters, reservations, budgets and budget flags in Redis."""

    def __init__(
        self, redis: StrRedis, settings: LLMProxySettings, leases: BudgetLeases | None = None
    ) -> None:
        self.redis = redis
        self.settings = settings
        self.leases = leases  # None: every request reserves in Redis
        self._reserve_script = redis.register_script(RESERVE_SCRIPT)
        self._settle_script = redis.register_script(SETTLE_SCRIPT)
        # The tasks an agent holds a claim on now, or None when no monitor books cost per task (the
        # plugin wires the task board and the monitor in; unset: nothing is logged).
        self.holdings: Callable[[str], Awaitable[list[str] | None]] | None = None
        self._logging: set[asyncio.Task[None]] = set()  # spending logs still being written
        # Settlements booked after their answer went out (LLMProxy.settle_soon), by agent: whoever reads
        # or judges an agent's books waits for its own first (``settled``).
        self._settling: dict[str, set[asyncio.Task[None]]] = {}

    # -- reservations ------------------------------------------------------------------------

    def _limits(self, name: str) -> list[str]:
        """The configured limits in ``BUDGETS`` order ('' = none; USD in nano-USD)."""
        out = []
        for scope, f in BUDGETS:
            limit = self.settings.budgets.for_agent(name) if scope == "agent" else self.settings.budgets.swarm
            value = getattr(limit, f)
            out.append(nusd_of(value) if f.startswith("usd") else ("" if value is None else str(value)))
        return out

    @staticmethod
    def _flag_keys(name: str, day: int) -> list[str]:
        agent, swarm = exhausted_key(name), SWARM_EXHAUSTED
        return [agent, f"{agent}:day:{day}", swarm, f"{swarm}:day:{day}"]

    async def reserve(
        self, name: str, model: str | None, body_bytes: int, max_tokens: int
    ) -> Reservation | BudgetRefusal | Hold:
        """Hold the request's worst case against every budget of ``name`` (one script), or say
        which budget it does not fit in (or the hold that stops ``name``). The first refusal of a
        budget claims its #ops notice."""
        now = time.time()
        estimate = input_estimate(body_bytes)
        cost = self.settings.price_for(model).worst_case(estimate, max_tokens)
        res = Reservation(
            id=secrets.token_hex(8),
            name=name,
            day=utc_day(now),
            model=model,
            input_tokens=estimate,
            max_tokens=max_tokens,
            tokens=estimate + max_tokens,
            nusd=round(cost * NANO),
        )
        if self.leases is not None and self.leases.draw(res):
            return res
        refused = await self._admit(res, now, probe=False)
        return res if refused is None else refused

    async def check(self, name: str) -> BudgetRefusal | Hold | None:
        """Whether ``name`` may make an unbilled upstream call (``count_tokens``): not while a hold
        stops it, nor while any of its budgets (or the swarm's) is used up. Reserves nothing."""
        now = time.time()
        return await self._admit(Reservation("-", name, utc_day(now), None, 0, 0, 0, 0), now, probe=True)

    async def _admit(self, res: Reservation, now: float, probe: bool) -> BudgetRefusal | Hold | None:
        name = res.name
        lease: Lease | None = None
        old: Lease | None = None
        if self.leases is not None and not probe:
            old, lease = self.leases.take_back(name), self.leases.ask(res)
        keys = [
            usage_key(name),
            USAGE_SWARM,
            day_key(res.day),
            budget_key(name),
            RESERVATIONS,
            RESERVATION_DATA,
            RESERVED,
            *self._flag_keys(name, res.day),
            hold_key(name),
            LEASED,
        ]
        args: list[Value] = [name, res.id, repr(now), repr(now + self.settings.reservation_ttl), res.day]
        args += [res.tokens, res.nusd, *self._limits(name), DAY_KEEP_S, int(probe)]
        args += [lease.id, lease.tokens, lease.nusd] if lease is not None else ["", 0, 0]
        args += [old.id, old.tokens, old.nusd] if old is not None else ["", 0, 0]
        try:
            answer = await self._reserve_script(keys=keys, args=args)
        except BaseException:
            # The script may or may not have run: both given back by a script of their own (a give-back
            # happens once, and a lease never granted has nothing to give).
            if self.leases is not None:
                for given in (old, lease):
                    if given is not None:
                        self.leases.give_back(given)
            raise
        if old is not None and self.leases is not None:
            self.leases.given_back(old)
        if answer[0] == 1:
            if lease is not None and answer[1] == 1 and self.leases is not None:
                self.leases.granted(lease)
            return None
        if answer[0] == 2:
            return Hold.parse(name, answer[1])
        _, index, used, reserved, limit, claimed, leased = answer
        scope, limit_field = BUDGETS[index - 1]
        need = res.nusd if limit_field.startswith("usd") else res.tokens
        refusal = BudgetRefusal(scope, name, limit_field, limit, used, reserved, need, leased=leased)
        if claimed:
            refusal.notices.append(refusal.message())
        return refusal

    async def record(self, name: str, model: str | None, usage: Usage) -> None:
        """Book ``usage`` to ``name`` today without a reservation (usage made outside the proxy)."""
        day = utc_day(time.time())
        none = Reservation(secrets.token_hex(8), name, day, model, 0, 0, 0, 0)  # nothing to release
        await self.settle(none, model, usage)

    async def settle(self, res: Reservation, model: str | None, usage: Usage | None) -> Hold | None:
        """Replace ``res`` by ``usage`` (None: release it, book nothing), atomically.

        A reservation that expired meanwhile was already dropped; the usage is booked all the same.
        Usage beyond the reservation (more tokens or USD than the input estimate and ``max_tokens``
        allow) is booked too, and sets a hold on ``res.name`` in the same script: returned (``new``
        when this call set it), so the caller can say so."""
        counts: list[int] = [getattr(usage, f) for f in TOKEN_FIELDS] if usage is not None else [0, 0, 0, 0]
        cost = self.settings.price_for(model or res.model).cost(*counts) if usage is not None else 0.0
        nusd, now = round(cost * NANO), time.time()
        # The name booked is the upstream's, never the request's (the agent's say-so), and a sane one.
        booked = booked_model(model)
        hold = None
        if usage is not None and res.bounded and (sum(counts) > res.tokens or nusd > res.nusd):
            hold = Hold(res.name, now, booked, sum(counts), nusd, res.tokens, res.nusd)
        keys = [
            usage_key(res.name),
            USAGE_SWARM,
            day_key(res.day),
            USAGE_AGENTS,
            RESERVATIONS,
            RESERVATION_DATA,
            RESERVED,
            hold_key(res.name),
            models_key(res.name),
            LEASED,
            gateway_keys.AUTH_VERSION,
            gateway_keys.AUTH_REPLICAS,
        ]
        args: list[Value] = [res.name, res.id, repr(now), int(usage is not None), nusd]
        tokens: int = sum(counts)
        args += [
            *counts,
            tokens,
            DAY_KEEP_S,
            hold.record() if hold else "",
            booked,
            gateway_keys.AUTH_CHANGED,
        ]
        # The tasks the call is attributed to are those held as it is booked: read beside the booking
        # (concurrent round trips, nothing added to the answer's time), never after it returned -- a
        # claim finished right after its last call would otherwise take none of that call's cost.
        spending = usage is not None and tokens and self.holdings is not None
        held = asyncio.ensure_future(self._held(res.name)) if spending else None
        try:
            if res.drawn is not None:  # its reservation's script first (never cancelled from here)
                await asyncio.wait({res.drawn})
            debt = res.lease if res.draw_failed and res.lease else ""
            args += [debt, res.tokens, res.nusd]
            if hold is None:
                settled = await self._settle_script(keys=keys, args=args)
            else:
                settled = await self._settle_holding(res.name, keys, args)
            if debt and self.leases is not None:
                self.leases.settled(res)
        finally:
            tasks = await held if held is not None else None
        if hold is not None:
            hold.new = isinstance(settled, list)
        if tasks is not None:
            # Off the answer's path (one round trip): the usage is booked above; the record of which
            # tasks it goes to follows within milliseconds, for the monitor to book (docs/llm-proxy.md).
            log_spent = self._log_spent(res.name, booked, now, tokens, nusd, tasks)
            task = asyncio.create_task(log_spent, name="llm-log-spent")
            self._logging.add(task)
            task.add_done_callback(self._logging.discard)
        return hold

    async def _settle_holding(self, name: str, keys: list[str], args: list[Value]) -> Any:
        """The settlement of an answer that booked more than it reserved: its script sets the hold and
        announces it (like a token change); this waits for every replica's ack, so that once it
        returns none admits ``name`` from a budget lease (gateway.llm.leases). Raises only when the
        script itself did not run."""
        if self.leases is not None:
            self.leases.drop(name)
        listening, settled = False, None
        try:
            async with acks_of(self.redis) as acks:
                listening = True
                settled = await self._settle_script(keys=keys, args=args)
                if isinstance(settled, list):
                    await acks.wait(settled[1])
            return settled
        except Exception as exc:
            if settled is not None:  # booked; only the wait for the acks (or its clean-up) failed
                log.warning("the hold on %s is set; waiting for the gateways' acks failed: %r", name, exc)
                return settled
            if listening or not isinstance(exc, RedisError):
                raise  # the script itself failed: the caller logs it, the reservation expires
            log.warning(
                "no subscription to the gateways' acks (%r): the hold's settlement waits instead", exc
            )
        settled = await self._settle_script(keys=keys, args=args)
        if isinstance(settled, list):  # every replica's token cache lease ends within this
            await asyncio.sleep(int(settled[1][1]) / 1000)
        return settled

    def track(self, name: str, settlement: asyncio.Task[None]) -> None:
        """Count ``settlement`` (of ``name``'s books) as still being booked until it is done."""
        pending = self._settling.setdefault(name, set())
        pending.add(settlement)

        def done(task: asyncio.Task[None]) -> None:
            pending.discard(task)
            if not pending and self._settling.get(name) is pending:
                del self._settling[name]
            if task.cancelled():
                log.error("the LLM usage of %s was not booked: its settlement was cancelled", name)
            elif (exc := task.exception()) is not None:
                log.error("settling the LLM usage of %s failed: %r", name, exc)

        settlement.add_done_callback(done)

    def _pending(self, name: str | None) -> set[asyncio.Task[None]]:
        if name is None:
            return {t for tasks in self._settling.values() for t in tasks}
        return set(self._settling.get(name, ()))

    async def settled(self, name: str | None = None) -> bool:
        """Wait (up to ``DRAIN_S``) for the settlements of ``name`` (None: everyone's) still being
        booked, so that a reader of the books sees every answer already given; False (logged) when
        some are still being booked after that."""
        pending = self._pending(name) if self._settling else set()
        if not pending:
            return True
        _, late = await asyncio.wait(pending, timeout=DRAIN_S)
        if late:
            log.warning(
                "%d LLM settlement(s) of %s still being booked after %.0fs",
                len(late),
                name or "the swarm",
                DRAIN_S,
            )
        return not late

    async def books_settled(self, name: str) -> None:
        """Before a request of ``name`` is judged (``reserve``, ``check``): its answers already given are
        booked (a hold one set included), or BooksBusy (retryable) rather than a judgement without them."""
        if not await self.settled(name):
            raise BooksBusy(f"the gateway is still booking {name}'s last model call; try again")

    async def drain(self) -> None:
        """At shutdown: wait for the settlements (new ones too: a stream cut by the shutdown settles as
        it closes), then the spending logs, still being written; ``DRAIN_S`` in all. What is left is
        logged (its reservations expire on their own)."""
        deadline = time.monotonic() + DRAIN_S
        while (pending := self._pending(None)) and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(pending, timeout=left)
        if self._logging and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(set(self._logging), timeout=left)
        if lost := self._pending(None):
            log.error("%d LLM settlement(s) not booked at shutdown (their reservations expire)", len(lost))

    async def _held(self, name: str) -> list[str] | None:
        """The tasks ``name`` holds now; None where nobody books cost per task, or the board cannot say
        (a failure loses only the call's attribution to a task, never the call)."""
        try:
            return await self.holdings(name) if self.holdings is not None else None
        except Exception as exc:
            log.warning("could not read the tasks %s holds for cost per task: %r", name, exc)
            return None

    async def _log_spent(
        self, name: str, model: str, ts: float, tokens: int, nusd: int, tasks: list[str]
    ) -> None:
        """Append the booked call to ``SPENT`` with the tasks held as it was booked; a failure here loses
        only that call's attribution to a task (its usage is booked already), never the call."""
        try:
            fields = {
                "agent": name,
                "ts": repr(ts),
                "model": model,
                "tokens": str(tokens),
                "nusd": str(nusd),
                "tasks": ",".join(tasks),
            }
            await self.redis.xadd(SPENT, fields, maxlen=SPENT_MAXLEN, approximate=True)
        except Exception as exc:
            log.warning("could not log the spending of %s for cost per task: %r", name, exc)

    async def renew(self, ids: list[str]) -> None:
        """Push the expiry of live reservations (their gateway is alive); gone ones stay gone."""
        if ids:
            expires = time.time() + self.settings.reservation_ttl
            await self.redis.zadd(RESERVATIONS, dict.fromkeys(ids, expires), xx=True)

    # -- budgets -----------------------------------------------------------------------------

    async def rearm_swarm_notices(self) -> None:
        """Clear the swarm's notice flags (at start-up: only a restart changes the swarm's budgets)."""
        day = utc_day(time.time())
        await self.redis.delete(*self._flag_keys("-", day)[2:])

    async def set_budget(self, name: str, update: BudgetUpdate) -> None:
        """Override ``name``'s budgets in Redis (null fields fall back); re-arms its notices and clears
        its hold (the operator's word that its books were looked at: after the answers already given
        are booked, so that none sets the hold again behind the operator's back)."""
        await self.settled(name)
        day = utc_day(time.time())
        # Announced: once this returns, no replica admits ``name`` from a lease granted before it.
        async with announced_change(self.redis) as pipe:
            pipe.delete(budget_key(name), hold_key(name), *self._flag_keys(name, day)[:2])
            mapping = {k: str(v) for k, v in update.model_dump().items() if v is not None}
            if mapping:
                pipe.hset(budget_key(name), mapping=mapping)

    # -- reading -----------------------------------------------------------------------------

    async def get(self, name: str) -> AgentUsage:
        await self.settled(name)
        return await self._get(name)

    async def _get(self, name: str) -> AgentUsage:
        day, prefix = utc_day(time.time()), f"agent:{name}:"
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(usage_key(name))
            pipe.hmget(budget_key(name), ["tokens", "usd", "tokens_per_day", "usd_per_day"])
            pipe.hmget(day_key(day), [f"{prefix}tokens", f"{prefix}nusd"])
            pipe.hmget(RESERVED, [f"{prefix}tokens", f"{prefix}nusd"])
            pipe.get(hold_key(name))
            pipe.hgetall(models_key(name))
            pipe.hmget(LEASED, [f"{prefix}tokens", f"{prefix}nusd"])
            raw, override, today, reserved, held, models, leased = await pipe.execute()
        u = agent_usage(name, raw, today, reserved, leased, **agent_limits(self.settings, name, override))
        by_tokens = sorted(models.items(), key=lambda kv: (-as_int(kv[1]), kv[0]))
        u.models = {str(m): as_int(n) for m, n in by_tokens}
        if held is not None:
            hold = Hold.parse(name, held)
            u.hold, u.hold_since = hold.describe(), hold.since
        return u

    async def all(self) -> dict[str, AgentUsage]:
        await self.settled()
        names = sorted(await self.redis.smembers(USAGE_AGENTS))
        return {n: await self._get(n) for n in names}

    async def main_models(self) -> dict[str, str]:
        """Agent -> the model the upstream answered most of its booked tokens with (agents with none
        booked are left out): the label the cost report and the dataset give an agent's usage."""
        await self.settled()
        names = sorted(await self.redis.smembers(USAGE_AGENTS))
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(models_key(name))
            booked = await pipe.execute()
        return {
            name: max(sorted(models), key=lambda m: as_int(models[m]))
            for name, models in zip(names, booked, strict=True)
            if models
        }

    async def swarm(self) -> AgentUsage:
        await self.settled()
        day = utc_day(time.time())
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(USAGE_SWARM)
            pipe.hmget(day_key(day), ["swarm:tokens", "swarm:nusd"])
            pipe.hmget(RESERVED, ["swarm:tokens", "swarm:nusd"])
            pipe.hmget(LEASED, ["swarm:tokens", "swarm:nusd"])
            raw, today, reserved, leased = await pipe.execute()
        return agent_usage("swarm", raw, today, reserved, leased, **swarm_limits(self.settings))

    async def reset(self, name: str) -> AgentUsage:
        """Forget ``name``'s usage, today's included (the swarm totals keep it), re-arm its notices and
        clear its hold; returns what it was. Reservations in flight stay until they settle."""
        before = await self.get(name)
        day = utc_day(time.time())
        async with announced_change(self.redis) as pipe:
            pipe.delete(usage_key(name), hold_key(name), models_key(name), *self._flag_keys(name, day)[:2])
            pipe.hdel(day_key(day), f"agent:{name}:tokens", f"agent:{name}:nusd")
            pipe.srem(USAGE_AGENTS, name)
        return before
