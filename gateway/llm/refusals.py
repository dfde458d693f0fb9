"""Why the LLM proxy stops an agent's model calls: a budget that does not fit, or a hold on its books.

``BudgetRefusal``: the first budget a request's worst case does not fit in (docs/llm-proxy.md, "The
refusal"). ``Hold``: an answer booked more than its request had reserved (the upstream reported more
than the input estimate and ``max_tokens`` allow); the agent's model calls stop until an operator
clears it, with the same overrides that clear a budget stop (``PUT /api/usage/{name}/budget`` or
``POST /api/usage/{name}/reset``). Both answer a request with the proxy's 429 (``BudgetRefused``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import ClassVar, Literal

NANO = 1_000_000_000
Scope = Literal["agent", "swarm"]
LimitField = Literal["tokens", "usd", "tokens_per_day", "usd_per_day"]
BUDGET_NAMES = {
    "tokens": "token budget",
    "usd": "USD budget",
    "tokens_per_day": "daily token budget",
    "usd_per_day": "daily USD budget",
}


def clear_command(name: str) -> str:
    """The operator's ways to clear ``name``'s hold (the budget overrides, which also clear its stops)."""
    return (
        f"PUT /api/usage/{name}/budget (an empty body {{}} keeps the configured budgets) "
        f"or POST /api/usage/{name}/reset"
    )


@dataclass
class BudgetRefusal:
    """A request that does not fit: the first budget it would exceed, and the amounts."""

    scope: Scope
    name: str  # the agent
    limit_field: LimitField
    limit: int  # tokens, or nano-USD
    used: int
    reserved: int  # by other requests in flight
    need: int  # this request's worst case
    notices: list[str] = field(default_factory=list)  # #ops notices this caller must post
    leased: int = 0  # held by gateways' budget leases (gateway.llm.leases)

    @property
    def budget(self) -> str:
        """``agent.tokens_per_day``: the budget's field (also in ``x-kswarm-budget``)."""
        return f"{self.scope}.{self.limit_field}"

    def _amount(self, value: int) -> str:
        return f"${value / NANO:.4f}" if self.limit_field.startswith("usd") else str(value)

    def message(self) -> str:
        whose = f"agent {self.name}'s" if self.scope == "agent" else "the swarm's"
        who = f"agent {self.name}" if self.scope == "agent" else "the swarm"
        kind, a = BUDGET_NAMES[self.limit_field], self._amount
        if self.used >= self.limit:
            what = f"{who} has used {a(self.used)} of its {kind} ({a(self.limit)})"
        else:
            what = (
                f"{whose} {kind} ({a(self.limit)}) would be exceeded: {a(self.used)} used + "
                f"{a(self.reserved)} reserved by requests in flight + "
                + (f"{a(self.leased)} held by gateways' budget leases + " if self.leased else "")
                + f"{a(self.need)} for this request (input estimate + max_tokens)"
            )
        until = "raises the budget or resets the usage"
        if self.limit_field.endswith("_per_day"):
            until += ", or the day ends (00:00 UTC)"
        return f"LLM budget exhausted: {what}. Model requests are refused until an operator {until}."


@dataclass
class Hold:
    """An answer of ``name`` that booked more than its request reserved: its calls stop until cleared."""

    name: str
    since: float  # when it was booked
    model: str
    tokens: int  # booked
    nusd: int
    reserved_tokens: int  # what the request had reserved (input estimate + max_tokens)
    reserved_nusd: int
    new: bool = False  # this settlement set the hold (its notice is to be posted)

    scope: ClassVar[Scope] = "agent"
    budget: ClassVar[str] = "agent.hold"  # in x-kswarm-budget

    def record(self) -> str:
        """The hold as stored in Redis (``ks:llm:hold:<name>``)."""
        fields = ("since", "model", "tokens", "nusd", "reserved_tokens", "reserved_nusd")
        return json.dumps({f: getattr(self, f) for f in fields})

    @classmethod
    def parse(cls, name: str, raw: str) -> Hold:
        """The stored hold; one that does not parse still holds (its text is kept in ``model``)."""
        try:
            data = json.loads(raw)
            tokens, nusd, reserved_tokens, reserved_nusd = (int(data[f]) for f in FIELDS)
            return cls(
                name, float(data["since"]), str(data["model"]), tokens, nusd, reserved_tokens, reserved_nusd
            )
        except (ValueError, KeyError, TypeError):
            return cls(name, 0.0, f"(unreadable hold record {raw[:80]!r})", 0, 0, 0, 0)

    def describe(self) -> str:
        """What happened, in one line (``AgentUsage.hold``, the Attention item)."""
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return (
            f"an answer at {when} (model {self.model}) booked {self.tokens} tokens "
            f"(${self.nusd / NANO:.4f}), more than its request reserved: {self.reserved_tokens} tokens "
            f"(${self.reserved_nusd / NANO:.4f}, input estimate + max_tokens)"
        )

    def message(self) -> str:
        """The refusal of each further request (it says "budget exhausted": agents stop on that)."""
        return (
            f"LLM budget exhausted: agent {self.name}'s model calls are stopped: {self.describe()}. "
            f"Model requests are refused until an operator clears it: {clear_command(self.name)}."
        )

    def notice(self) -> str:
        """The ``#ops`` notice, posted once when the hold is set."""
        return (
            f"LLM books: agent {self.name}: {self.describe()}; the upstream reported more than the "
            f"request allowed. {self.name}'s model calls are stopped until an operator clears it: "
            f"{clear_command(self.name)}."
        )


FIELDS = ("tokens", "nusd", "reserved_tokens", "reserved_nusd")
