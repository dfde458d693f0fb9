"""The LLM books' records and their layout in Redis (``gateway.llm.usage.UsageStore`` keeps them).

Layout (all under ``ks:llm:``): one hash per agent with its token counters, request count and cost
in nano-USD (integers, so increments are exact), one hash with the swarm totals, one hash per UTC
day with each agent's and the swarm's tokens and cost of that day, a set of the agents that have
used the proxy, an optional budget override hash per agent (set by operators), and the live
reservations: a sorted set of reservation ids scored by expiry, a hash with each one's amounts,
and a hash with the sums of the live ones per budget (and one with the budget leases' sums,
``gateway.llm.leases``). Flags make each budget's ``#ops`` notice fire once per crossing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from gateway.keys import PREFIX
from gateway.llm.config import LLMProxySettings
from gateway.llm.refusals import NANO, LimitField, Scope
from gateway.llm.usage_models import AgentUsage

DAY_S = 86_400
BYTES_PER_TOKEN = 3  # the input estimate: see docs/llm-proxy.md, "Reservations"
DAY_KEEP_S = 3 * DAY_S  # a day's counters outlive it long enough for late settlements
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
TOKEN_TYPES = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_creation_input_tokens": "cache_write",
    "cache_read_input_tokens": "cache_read",
}
USAGE_AGENTS = f"{PREFIX}llm:usage-agents"
USAGE_SWARM = f"{PREFIX}llm:usage-swarm"
SWARM_EXHAUSTED = f"{PREFIX}llm:exhausted-swarm"
RESERVATIONS = f"{PREFIX}llm:reservations"  # zset: reservation id -> expiry (unix time)
RESERVATION_DATA = f"{PREFIX}llm:reservation-data"  # hash: id -> "name day tokens nusd"
RESERVED = f"{PREFIX}llm:reserved"  # hash: live reservations' sums per budget
LEASED = f"{PREFIX}llm:leased"  # hash: live budget leases' sums per budget (gateway.llm.leases)
BOOK_KEYS = [RESERVATIONS, RESERVATION_DATA, RESERVED, LEASED]  # what the lease scripts touch
# Every booked call, with the tasks its agent held when it was booked (what a kernel cost: the monitor
# books these to the tasks, exactly; a claim shorter than any sampling interval included).
SPENT = f"{PREFIX}llm:spent"
SPENT_MAXLEN = 200_000
DRAIN_S = 5.0

# The order of the reserve script's limits and of its override fields.
BUDGETS: tuple[tuple[Scope, LimitField], ...] = tuple(
    (scope, f) for scope in ("agent", "swarm") for f in ("tokens", "usd", "tokens_per_day", "usd_per_day")
)


def usage_key(name: str) -> str:
    return f"{PREFIX}llm:usage:{name}"


def models_key(name: str) -> str:
    """Tokens booked per model the upstream answered ``name``'s calls with (model_names.booked_model)."""
    return f"{PREFIX}llm:models:{name}"


def budget_key(name: str) -> str:
    return f"{PREFIX}llm:budget:{name}"


def exhausted_key(name: str) -> str:
    return f"{PREFIX}llm:exhausted:{name}"


def hold_key(name: str) -> str:
    """Set when an answer of ``name`` booked more than it reserved: its calls stop until it is cleared."""
    return f"{PREFIX}llm:hold:{name}"


def day_key(day: int) -> str:
    return f"{PREFIX}llm:day:{day}"


def utc_day(now: float) -> int:
    """Days since 1970-01-01 UTC: unix time has no leap seconds, so days turn at 00:00 UTC."""
    return int(now // DAY_S)


def input_estimate(body_bytes: int) -> int:
    """Input tokens counted for a reservation: the request body's size in bytes / 3, rounded up."""
    return -(-body_bytes // BYTES_PER_TOKEN)


@dataclass
class Usage:
    """The token usage of one response (Anthropic's ``usage`` object, cache fields included)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    reported: set[str] = field(default_factory=set, compare=False, repr=False)  # counters the upstream gave

    def merge(self, usage: Any) -> None:
        """Take every known counter present in ``usage`` (later events carry cumulative values)."""
        if not isinstance(usage, dict):
            return
        for f in TOKEN_FIELDS:
            value = usage.get(f)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                setattr(self, f, value)
                self.reported.add(f)

    @property
    def total(self) -> int:
        return sum(getattr(self, f) for f in TOKEN_FIELDS)


@dataclass
class Reservation:
    """A request's worst-case cost, held against its budgets until it is settled."""

    id: str
    name: str
    day: int
    model: str | None
    input_tokens: int  # the input estimate
    max_tokens: int
    tokens: int
    nusd: int
    # Admitted from a budget lease (its id): the script that writes its own reservation, settled after
    # it ran; when that script failed, the request is settled against the lease's record instead.
    lease: str | None = field(default=None, compare=False)
    drawn: asyncio.Task[None] | None = field(default=None, compare=False, repr=False)
    draw_failed: bool = field(default=False, compare=False)

    @property
    def bounded(self) -> bool:
        """A request's reservation (not ``record``'s empty one): what it books is checked against it."""
        return self.max_tokens > 0

    def billable(self, usage: Usage | None, output_floor: int | None = None) -> Usage:
        """What to book: ``usage`` with the counts the upstream did not report filled in by their
        worst case (input: the estimate; output: max_tokens). ``output_floor``: the output of a
        stream cut before its final count is the larger of the reported one and this floor."""
        usage = usage or Usage()
        out = Usage(**{f: getattr(usage, f) for f in TOKEN_FIELDS})
        if "input_tokens" not in usage.reported:
            out.input_tokens = self.input_tokens
        if output_floor is not None:
            out.output_tokens = max(out.output_tokens, output_floor)
        elif "output_tokens" not in usage.reported:
            out.output_tokens = self.max_tokens
        return out


def as_int(value: str | None) -> int:
    return int(value) if value else 0


def opt_float(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None


def opt_int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


def nusd_of(usd: float | None) -> str:
    return "" if usd is None else str(round(usd * NANO))


def agent_limits(settings: LLMProxySettings, name: str, override: list[str | None]) -> dict[str, Any]:
    """``name``'s budgets: the operator's override field by field, else the settings'."""
    limit = settings.budgets.for_agent(name)
    tokens, usd, tokens_day, usd_day = override
    return {
        "budget_tokens": opt_int(tokens) if tokens else limit.tokens,
        "budget_usd": opt_float(usd) if usd else limit.usd,
        "budget_tokens_per_day": opt_int(tokens_day) if tokens_day else limit.tokens_per_day,
        "budget_usd_per_day": opt_float(usd_day) if usd_day else limit.usd_per_day,
    }


def swarm_limits(settings: LLMProxySettings) -> dict[str, Any]:
    s = settings.budgets.swarm
    return {
        "budget_tokens": s.tokens,
        "budget_usd": s.usd,
        "budget_tokens_per_day": s.tokens_per_day,
        "budget_usd_per_day": s.usd_per_day,
    }


def agent_usage(
    name: str,
    raw: dict[str, str],
    today: list[str | None],
    reserved: list[str | None],
    leased: list[str | None],
    **limits: Any,
) -> AgentUsage:
    """One agent's (or the swarm's) books as read from Redis, with its budgets."""
    counts = {f: as_int(raw.get(f)) for f in TOKEN_FIELDS}
    u = AgentUsage(
        name=name,
        requests=as_int(raw.get("requests")),
        total_tokens=sum(counts.values()),
        cost_usd=as_int(raw.get("cost_nusd")) / NANO,
        today_tokens=as_int(today[0]),
        today_cost_usd=as_int(today[1]) / NANO,
        reserved_tokens=as_int(reserved[0]),
        reserved_usd=as_int(reserved[1]) / NANO,
        leased_tokens=as_int(leased[0]),
        leased_usd=as_int(leased[1]) / NANO,
        last_request=opt_float(raw.get("last_request")),
        **counts,
        **limits,
    )
    pairs = [
        (u.total_tokens, u.budget_tokens),
        (u.cost_usd, u.budget_usd),
        (u.today_tokens, u.budget_tokens_per_day),
        (u.today_cost_usd, u.budget_usd_per_day),
    ]
    u.exhausted = any(limit is not None and used >= limit for used, limit in pairs)
    return u
