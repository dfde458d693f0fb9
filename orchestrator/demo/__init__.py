"""``kswarm demo``: the whole product on the embedded default, driven by a scripted demo policy.

Modules: ``spec`` (the demo swarm), ``launcher`` (Redis, gateway with every component, agents, job
worker), ``flow`` (set-up, kick-off, watching, dataset build), ``progress`` (rich views), ``policy`` and
``steps`` (the scripted agents' rules), ``agent`` (the agents' entry point), ``command`` (the CLI).
"""
