"""The single-host shape: ``kswarm up``'s launcher (Redis, the gateway, the supervisor in one
foreground process) and the embedded Redis it runs."""
