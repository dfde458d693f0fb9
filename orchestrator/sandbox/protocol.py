"""The ``Sandbox`` protocol: what both implementations (``bubblewrap.py``, ``namespaces.py``) offer.

Both take the same ``SandboxPlan`` and build the same walls (docs/sandbox.md); one shared suite attacks
both (``tests/orchestrator/sandbox/test_sandbox_protocol.py``)."""

from __future__ import annotations

from typing import NoReturn, Protocol, runtime_checkable

from orchestrator.sandbox.plan import SandboxPlan


@runtime_checkable
class Sandbox(Protocol):
    name: str

    def unavailable(self) -> str | None:
        """Why this implementation cannot be used here at all (None: it can be tried)."""
        ...

    def describe(self) -> str:
        """One phrase for banners and job logs (``bubblewrap 0.8.0``)."""
        ...

    def run(self, plan: SandboxPlan) -> NoReturn:
        """Become the sandbox's launcher: run ``plan``'s command in a sandbox and exit with its status
        (``SETUP_FAILED`` with one ``kswarm sandbox:`` line when the sandbox could not be built)."""
        ...
