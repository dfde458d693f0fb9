"""The services components share inside one gateway, as typed handles (no string-keyed bag).

A ``ServiceKey[T]`` names one service of type ``T`` and the plugin that provides it. A plugin declares
the keys it ``provides`` and the keys it ``requires`` (or takes if present: ``optional``), and puts what
it provides into ``ctx.services`` while installing; a consumer reads ``ctx.services.get(FORGE)`` and
gets a ``Forge``, typed. ``gateway.plugin`` checks the declarations before anything is installed (a
required service nobody provides, a service provided twice, a cycle: the gateway does not start), so
``get`` of a required key never fails at request time. Keys are objects, not classes, because several
services are Protocols (``Forge``), which a type checker does not accept where a concrete class is due.

Every service the built-in components share is listed below: this is the map of who uses whom.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from gateway.errors import PluginError

if TYPE_CHECKING:
    from gateway.counterexamples.service import CounterexampleService
    from gateway.forge.gate.gate import ReviewGate
    from gateway.forge.gate.ledger import EvidenceLedger
    from gateway.forge.protocol import Forge
    from gateway.forge.settings import ForgeSettings
    from gateway.jobs.service import JobService
    from gateway.kb.service import KnowledgeBase
    from gateway.llm.proxy import LLMProxy
    from gateway.llm.usage import UsageStore
    from gateway.monitor.service import MonitorService
    from gateway.swarm.liveness import LivenessBook
    from gateway.tasks.service import BoardService
    from gateway.ui.service import UiService

T = TypeVar("T")


class ServiceKey(Generic[T]):
    """The typed name of one shared service; ``provided_by`` is the plugin expected to provide it
    (what a start-up error names when it is missing)."""

    def __init__(self, name: str, provided_by: str) -> None:
        self.name = name
        self.provided_by = provided_by

    def __repr__(self) -> str:
        return f"ServiceKey({self.name!r}, provided_by={self.provided_by!r})"


class MissingService(LookupError):
    """``get`` of a service nobody provided: a plugin that did not declare what it uses (a bug)."""


class ServiceRegistry:
    """The services of one app (on ``GatewayContext.services``); each key is provided at most once."""

    def __init__(self) -> None:
        self._services: dict[ServiceKey[Any], Any] = {}

    def provide(self, key: ServiceKey[T], service: T) -> None:
        if key in self._services:  # a second provider would take over what others rely on
            raise PluginError(f"{key.name} is already provided")
        self._services[key] = service

    def get(self, key: ServiceKey[T]) -> T:
        """The service; for keys the caller's plugin ``requires``."""
        try:
            return cast(T, self._services[key])
        except KeyError:
            raise MissingService(
                f"no {key.name} in this gateway (the {key.provided_by} plugin provides it)"
            ) from None

    def find(self, key: ServiceKey[T]) -> T | None:
        """The service, or None when no plugin provides it; for ``optional`` keys."""
        return cast("T | None", self._services.get(key))

    def __contains__(self, key: object) -> bool:
        return key in self._services

    def keys(self) -> list[ServiceKey[Any]]:
        return list(self._services)

    def names(self) -> list[str]:
        return [key.name for key in self._services]


# -- the built-in components' services ---------------------------------------------------------------
FORGE: ServiceKey[Forge] = ServiceKey("forge", "forge")
FORGE_SETTINGS: ServiceKey[ForgeSettings] = ServiceKey("forge settings", "forge")
REVIEW_GATE: ServiceKey[ReviewGate] = ServiceKey("review gate", "forge")
EVIDENCE_LEDGER: ServiceKey[EvidenceLedger] = ServiceKey("evidence ledger", "forge")
LLM_PROXY: ServiceKey[LLMProxy] = ServiceKey("llm proxy", "llm")
LLM_USAGE: ServiceKey[UsageStore] = ServiceKey("llm usage", "llm")
JOB_SERVICE: ServiceKey[JobService] = ServiceKey("job service", "jobs")
TASK_BOARD: ServiceKey[BoardService] = ServiceKey("task board", "tasks")
KNOWLEDGE_BASE: ServiceKey[KnowledgeBase] = ServiceKey("knowledge base", "kb")
MONITOR: ServiceKey[MonitorService] = ServiceKey("monitor", "monitor")
# The one computation of an agent's liveness, with the monitor's stall threshold (gateway/swarm/liveness.py).
LIVENESS: ServiceKey[LivenessBook] = ServiceKey("agent liveness", "monitor")
UI: ServiceKey[UiService] = ServiceKey("ui", "ui")
COUNTEREXAMPLES: ServiceKey[CounterexampleService] = ServiceKey("counterexamples", "counterexamples")
