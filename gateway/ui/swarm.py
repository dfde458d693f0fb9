"""The orchestrator as the UI sees it: its records and its control files under ``$KSWARM_HOME/swarm``.

The orchestrator takes requests through marker files (``swarm/requests/<name>.restart``,
``swarm/quarantine/<name>``) and keeps one record per agent (``swarm/agents/<name>.json``); the
``kswarm agent ...`` commands use the same files. The gateway shares ``$KSWARM_HOME`` with the
orchestrator in the embedded mode (``kswarm up``) and in compose when the home volume is mounted;
when it does not, or no orchestrator runs, every action says why it is unavailable.

Everything here is blocking file I/O: call it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACTIONS = ("restart", "quarantine", "release", "memory")


class SwarmUnavailable(RuntimeError):
    """The orchestrator cannot do this now; the message says why (shown to the operator)."""


@dataclass
class SwarmView:
    """One look at the orchestrator's state."""

    available: bool
    reason: str = ""  # why the orchestrator's data/actions are unavailable
    swarm: str | None = None
    backend: str | None = None
    supervised: bool = False
    agents: list[str] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    quarantined: set[str] = field(default_factory=set)

    def action_reasons(self, name: str, disabled: bool) -> dict[str, str | None]:
        """For each action on ``name``: None when it can be done, else why not (a tooltip)."""
        if not self.available:
            return dict.fromkeys(ACTIONS, self.reason)
        if name not in self.agents:
            why = f"{name} is not an agent of swarm {self.swarm} (not managed by the orchestrator)"
            return dict.fromkeys(ACTIONS, why)
        held = name in self.quarantined or disabled
        down = None if self.supervised else "no orchestrator is running for this swarm (kswarm up)"
        return {
            "restart": down or ("release it first: it is quarantined" if held else None),
            "quarantine": "already quarantined" if held else None,
            "release": None if held else "not quarantined",
            "memory": None,
        }


def supervised(lock: Any) -> bool:
    """Whether an orchestrator holds the swarm's ``flock``, asked without taking it ourselves.

    ``SupervisorLock.held_elsewhere`` takes the lock for a moment, and a ``kswarm up`` starting in
    that moment would fail; a page refreshing every few seconds makes that moment frequent. Linux
    lists every lock in ``/proc/locks`` (``... FLOCK ... <pid> <maj>:<min>:<inode> ...``).
    """
    path: Path = lock.path
    try:
        inode = path.stat().st_ino
    except FileNotFoundError:
        return False  # no lock file: no orchestrator ever ran here
    try:
        table = Path("/proc/locks").read_text()
    except OSError:  # not Linux
        return bool(lock.held_elsewhere())
    for line in table.splitlines():
        fields = line.split()
        if "FLOCK" in fields and any(f.rsplit(":", 1)[-1] == str(inode) for f in fields if f.count(":") == 2):
            return True
    return False


class SwarmControl:
    """Read the orchestrator's state and write its control files, for one ``$KSWARM_HOME``."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def _modules(self) -> Any:
        try:
            from orchestrator import memory, provision, reconcile, supervisor
        except ImportError as exc:  # the gateway alone, without the orchestrator package
            raise SwarmUnavailable(f"the orchestrator package is not installed here ({exc})") from exc
        return memory, provision, reconcile, supervisor

    def layout(self) -> Any:
        _, provision, _, _ = self._modules()
        return provision.SwarmLayout(self.home)

    def view(self) -> SwarmView:
        try:
            _, _, reconcile, supervisor = self._modules()
        except SwarmUnavailable as exc:
            return SwarmView(False, str(exc))
        layout = self.layout()
        info = supervisor.SwarmInfo.load(layout)
        if info is None:
            return SwarmView(
                False,
                f"no swarm in {self.home} (start one with kswarm up -f swarm.yaml, "
                "or give the gateway the orchestrator's KSWARM_HOME)",
            )
        records = {}
        for name in info.agents:
            rec = reconcile.load_record(layout, name, info.backend)
            records[name] = rec.model_dump()
        return SwarmView(
            True,
            swarm=info.swarm,
            backend=info.backend,
            supervised=supervised(supervisor.SupervisorLock(layout)),
            agents=list(info.agents),
            records=records,
            quarantined={n for n in info.agents if reconcile.is_quarantined(layout, n)},
        )

    def _managed(self, name: str) -> SwarmView:
        view = self.view()
        if not view.available:
            raise SwarmUnavailable(view.reason)
        if name not in view.agents:
            raise SwarmUnavailable(f"{name} is not an agent of swarm {view.swarm}")
        return view

    def request_restart(self, name: str) -> None:
        view = self._managed(name)
        if not view.supervised:
            raise SwarmUnavailable("no orchestrator is running for this swarm (kswarm up)")
        if name in view.quarantined:
            raise SwarmUnavailable(f"{name} is quarantined: release it first")
        _, _, _, supervisor = self._modules()
        supervisor.request_restart(self.layout(), name)

    def hold(self, name: str) -> None:
        """The quarantine marker: the orchestrator stops the agent and keeps it stopped."""
        self._managed(name)
        _, _, reconcile, _ = self._modules()
        marker = reconcile.control_dir(self.layout(), "quarantine")
        marker.mkdir(parents=True, exist_ok=True)
        (marker / name).write_text(str(time.time()))

    def unhold(self, name: str) -> None:
        self._managed(name)
        _, _, reconcile, _ = self._modules()
        (reconcile.control_dir(self.layout(), "quarantine") / name).unlink(missing_ok=True)

    def memory(self, name: str) -> Any:
        """``orchestrator.memory.MemoryView``: MEMORY.md, files (size -1 = symlink), snapshots."""
        self._managed(name)
        memory, _, _, _ = self._modules()
        try:
            return memory.show(self.layout(), name)
        except memory.MemoryOpError as exc:
            raise SwarmUnavailable(str(exc)) from exc

    def snapshot(self, name: str) -> str:
        self._managed(name)
        memory, _, _, _ = self._modules()
        try:
            return memory.snapshot(self.layout(), name, "ui")
        except memory.MemoryOpError as exc:
            raise SwarmUnavailable(str(exc)) from exc

    def rollback(self, name: str, snap_id: str) -> tuple[str, bool]:
        """Restore ``snap_id``; returns it and whether the agent was asked to restart to reread it."""
        view = self._managed(name)
        memory, _, _, supervisor = self._modules()
        try:
            restored = memory.rollback(self.layout(), name, snap_id)
        except memory.MemoryOpError as exc:
            raise SwarmUnavailable(str(exc)) from exc
        if view.supervised and name not in view.quarantined:
            supervisor.request_restart(self.layout(), name)
            return restored, True
        return restored, False
