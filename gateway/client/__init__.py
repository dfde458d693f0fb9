"""How any process reaches the gateway: ``http`` (sync and async REST over TCP or the unix socket),
``home`` (finding a running gateway and its operator token under ``$KSWARM_HOME``), ``jobs`` (the
worker's side of ``/api/jobs``, typed with the job runner's wire models). ``http`` and ``home`` import
nothing else of the gateway: the agent image needs only them and ``agents/``."""
