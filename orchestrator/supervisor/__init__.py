"""The orchestrator's supervisor (``python -m orchestrator.supervisor``): the entry point and
``Supervisor`` (``main.py``), the reconcile loop (``reconcile.py``), the operator actions
(``operations.py``), the swarm seam (``control.py``, ``control_link.py``), memory hygiene
(``memory.py``), orphan reaping (``orphans.py``) and the job workers it runs for each pool of the
spec (``pool_workers.py``; the worker process itself is ``orchestrator/worker/``).
"""
