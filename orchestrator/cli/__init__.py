"""The ``kswarm`` command: one module per noun, assembled in ``main``.

Nouns: ``swarm`` (init, up, down, ps, logs), ``agent`` (add, list, restart, quarantine, release,
memory), ``chat`` (send, tail), ``prs`` (prs, pr show/why), ``jobs`` (jobs, job show), ``tasks``,
``dataset``, ``demo``. Shared: ``commands`` (how a command reaches the gateway and how its errors end
it) and ``output`` (consoles, one-line errors, JSON). Errors and exit codes: ``docs/cli.md``.
"""

from orchestrator.cli.main import main

__all__ = ["main"]
