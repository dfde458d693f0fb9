"""A replica's budget leases: an agent's next model requests admitted without a Redis round trip.

Every request reserves its worst case against every budget before it goes upstream
(``gateway.llm.usage``). Without leases that is one Lua script on the answer's path per request. With
them, a request that reserves in Redis also asks for a *lease* for its agent: ``budget_lease_requests``
times its own worst case, held in Redis like a reservation (the leased sums, beside the reserved ones)
and granted only where it takes at most a quarter of what each budget has left
(``budget_scripts.RESERVE_SCRIPT``). The agent's next requests on this replica are then admitted here,
from what is left of the lease, with no round trip; each one's worst case is moved from the lease to a
reservation of its own by a script sent beside the request (``DRAW_SCRIPT``), and settled as before.

Why the books never exceed a budget: what a lease admits was held against every budget when it was
granted, and a draw only moves an amount from the lease to the request, never adds one. So usage +
reservations + leases stays within every limit, whichever replica admitted what.

When a lease stops admitting (it is given back: ``RELEASE_SCRIPT`` takes what this replica has left of
it, never more, so a request admitted from it is always held, by the lease or by its own reservation):
- after ``budget_lease_s``, or when the UTC day it was granted on ends;
- when it has too little left for a request (that request reserves in Redis, which gives back the rest
  in the same script, and may get a new one);
- at once, everywhere, on any change to an agent's books: an operator's budget update or reset, and a
  hold set by a settlement. Those are announced like a token revocation (``gateway.auth_changes``: the
  writer waits until every live replica has acknowledged), and a lease is used only while the token
  cache it was granted under is (``guard``: the cache's generation while its lease on the subscription
  holds). So when such a change returns, no replica admits from a lease granted before it;
- at shutdown; a crashed replica's leases expire with the reservation TTL.

The replica renews a lease's record in Redis (with its reservations) for as long as it answers for
any of it: until its rest is given back and every request admitted from it has its own reservation or
was settled. A request whose draw script failed (Redis busy or away) is settled against the lease's
record instead (``SETTLE_SCRIPT`` takes its share from there).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from gateway.cancellation import nap, rounds
from gateway.llm.budget_scripts import DRAW_SCRIPT, RELEASE_SCRIPT
from gateway.llm.config import LLMProxySettings
from gateway.redis_facade import StrRedis, Value

if TYPE_CHECKING:
    from prometheus_client import Counter

    from gateway.llm.books import Reservation

log = logging.getLogger("kswarm.llm_usage")

UPKEEP_S = 1.0  # how often leases past their end are given back (and failed give-backs retried)


@dataclass
class Lease:
    """A lease held by this replica for one agent: what is left of it here, and until when."""

    id: str  # "L:<hex>": the scripts sum a lease's amounts apart from requests' reservations
    name: str
    day: int
    tokens: int
    nusd: int
    generation: int  # the token cache's generation it was asked for under
    ends: float  # time.monotonic(): no request is admitted from it after this
    draws: set[asyncio.Task[None]] = field(default_factory=set)  # draw scripts not yet run
    # Requests whose draw script failed: their share stays in the lease's record until each is settled.
    failed: weakref.WeakValueDictionary[str, Reservation] = field(default_factory=weakref.WeakValueDictionary)
    given_back: bool = False  # its rest is back in Redis
    taken: bool = False  # a reservation script is giving its rest back (``take_back``)
    giving_back: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        """Nothing of it is this replica's to answer for any more (its record is no longer renewed)."""
        return self.given_back and not self.draws and not self.failed


class BudgetLeases:
    """This replica's leases, one per agent at most (see the module)."""

    def __init__(
        self,
        redis: StrRedis,
        settings: LLMProxySettings,
        book_keys: list[str],
        guard: Callable[[], int | None],
        granted: Counter | None = None,
        drawn: Counter | None = None,
    ) -> None:
        self.settings = settings
        self.book_keys = book_keys  # reservations, reservation data, reserved sums, leased sums
        self.guard = guard  # the token cache's generation while it may be used, else None
        self._granted, self._drawn = granted, drawn
        self._leases: dict[str, Lease] = {}  # the leases admitting, by agent
        self._owned: dict[str, Lease] = {}  # every lease this replica answers for, by id (renewed)
        self._draw = redis.register_script(DRAW_SCRIPT)
        self._release = redis.register_script(RELEASE_SCRIPT)
        self._returning: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._leases)

    # -- admitting ----------------------------------------------------------------------------

    def draw(self, res: Reservation) -> bool:
        """Admit ``res`` from its agent's lease here (True), its reservation written beside it; False
        when there is no usable lease with room for it (then it reserves in Redis)."""
        lease = self._leases.get(res.name)
        if lease is None:
            return False
        if self._expired(lease) or lease.day != res.day:
            self.drop(res.name)
            return False
        if lease.tokens < res.tokens or lease.nusd < res.nusd:
            return False
        lease.tokens -= res.tokens
        lease.nusd -= res.nusd
        res.lease = lease.id
        res.drawn = asyncio.create_task(self._write_draw(lease, res), name="llm-lease-draw")
        lease.draws.add(res.drawn)
        res.drawn.add_done_callback(lease.draws.discard)
        if self._drawn is not None:
            self._drawn.inc()
        return True

    def _expired(self, lease: Lease) -> bool:
        """Past its time, or granted under a token cache dropped since (a change to the books)."""
        return time.monotonic() >= lease.ends or self.guard() != lease.generation

    def take_back(self, name: str) -> Lease | None:
        """``name``'s lease here, which admits no more: for the reservation script to give back what is
        left of it first (too small for the request that now reserves, its rest must not count against
        that request). The caller says whether it did (``given_back``) or gives it back (``give_back``);
        until then the upkeep leaves it alone."""
        lease = self._leases.pop(name, None)
        if lease is not None:
            lease.taken = True
        return lease

    def ask(self, res: Reservation) -> Lease | None:
        """The lease ``res``'s reservation asks for, or None (leases off, or the cache not in use)."""
        generation = self.guard()
        if generation is None or self.settings.budget_lease_requests <= 0:
            return None
        times = self.settings.budget_lease_requests
        if times * max(res.tokens, res.nusd) >= 2**53:  # beyond what the scripts' Lua numbers hold exactly
            return None
        life = self.settings.budget_lease_s
        return Lease(
            id=f"L:{secrets.token_hex(8)}",
            name=res.name,
            day=res.day,
            tokens=res.tokens * times,
            nusd=res.nusd * times,
            generation=generation,
            ends=time.monotonic() + life,
        )

    def granted(self, lease: Lease) -> None:
        """Redis granted ``lease``: it replaces the agent's lease here (given back), unless a change
        came in meanwhile (then it is given back at once)."""
        if self._granted is not None:
            self._granted.inc()
        self._owned[lease.id] = lease
        if self.guard() != lease.generation:
            self.give_back(lease)
            return
        self.drop(lease.name)
        self._leases[lease.name] = lease

    def given_back(self, lease: Lease) -> None:
        """The reservation script gave back ``lease``'s rest (``take_back``)."""
        lease.given_back = True

    def settled(self, res: Reservation) -> None:
        """``res``, whose draw script failed, was settled against its lease's record."""
        lease = self._owned.get(res.lease or "")
        if lease is not None:
            lease.failed.pop(res.id, None)

    def owned_ids(self) -> list[str]:
        """The records this replica answers for (renewed with its reservations)."""
        for lease_id, lease in list(self._owned.items()):
            if lease.done:
                del self._owned[lease_id]
        return list(self._owned)

    # -- giving back --------------------------------------------------------------------------

    def drop(self, name: str) -> None:
        """No more requests of ``name`` from its lease here; what is left of it is given back."""
        lease = self._leases.pop(name, None)
        if lease is not None:
            self.give_back(lease)

    def drop_all(self) -> None:
        for name in list(self._leases):
            self.drop(name)

    def give_back(self, lease: Lease) -> None:
        """What this replica has left of ``lease`` goes back (a script of its own, after its draws')."""
        self._owned[lease.id] = lease
        lease.taken = False
        if lease.given_back or (lease.giving_back is not None and not lease.giving_back.done()):
            return
        lease.giving_back = asyncio.create_task(self._return(lease), name="llm-lease-return")
        self._returning.add(lease.giving_back)
        lease.giving_back.add_done_callback(self._returning.discard)

    async def _return(self, lease: Lease) -> None:
        # Its draws' scripts first, so that each takes its own share; never cancelled from here.
        while pending := {draw for draw in lease.draws if not draw.done()}:
            await asyncio.wait(pending)
        args: list[Value] = [lease.id, repr(time.time()), lease.tokens, lease.nusd]
        try:
            await self._release(keys=self.book_keys, args=args)
        except RedisError as exc:  # renewed meanwhile; the upkeep tries again
            log.warning("could not give back the budget lease of %s: %r", lease.name, exc)
        else:
            lease.given_back = True

    async def _write_draw(self, lease: Lease, res: Reservation) -> None:
        now = time.time()
        args = [lease.id, res.id, repr(now), repr(now + self.settings.reservation_ttl)]
        try:
            await self._draw(keys=self.book_keys, args=[*args, res.name, res.day, res.tokens, res.nusd])
        except RedisError as exc:  # the lease's record keeps the share: settled from there
            log.warning("could not move a request of %s from its budget lease: %r", res.name, exc)
            res.draw_failed = True
            lease.failed[res.id] = res

    # -- lifetime -----------------------------------------------------------------------------

    async def upkeep(self) -> None:
        """Give back leases past their end or granted under a dropped cache (the app's lifespan)."""
        for _ in rounds():
            await nap(UPKEEP_S)
            for name, lease in list(self._leases.items()):
                if self._expired(lease):
                    self.drop(name)
            for lease in list(self._owned.values()):  # a give-back that failed is tried again
                if not (lease.given_back or lease.taken) and self._leases.get(lease.name) is not lease:
                    self.give_back(lease)

    async def close(self) -> None:
        """At shutdown: every lease given back (after its draws)."""
        self.drop_all()
        if self._returning:
            await asyncio.wait(set(self._returning), timeout=5.0)
