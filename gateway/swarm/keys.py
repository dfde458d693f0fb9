"""Redis names of the swarm seam (under the gateway's ``ks:`` prefix; see gateway/keys.py).

| key | type | written by | content |
|---|---|---|---|
| ``ks:swarm:supervisor`` | hash, TTL | supervisor | ``owner``, ``json`` (``SupervisorBeat``): alive |
| ``ks:swarm:status`` | string | supervisor | ``SwarmStatus``: the swarm, its backend, its agents |
| ``ks:swarm:agents`` | hash | supervisor | agent name -> ``AgentStatus`` |
| ``ks:swarm:memory`` | hash | supervisor | agent name -> ``MemorySummary`` |
| ``ks:swarm:control`` | stream | gateway | ``request`` = ``ControlRequest``; group ``supervisor`` reads it |
| ``ks:swarm:reply:<id>`` | string, TTL | supervisor | ``ControlReply`` to the control entry ``<id>`` |
"""

from gateway.keys import PREFIX

SUPERVISOR = f"{PREFIX}swarm:supervisor"
STATUS = f"{PREFIX}swarm:status"
AGENTS = f"{PREFIX}swarm:agents"
MEMORY = f"{PREFIX}swarm:memory"
CONTROL = f"{PREFIX}swarm:control"

# One consumer group, one consumer: a gateway has one swarm, and one supervisor holds it at a time
# (the heartbeat's owner). A stable consumer name lets the next supervisor read what the last one was
# handed but never acknowledged (XREADGROUP from id 0).
CONTROL_GROUP = "supervisor"
CONTROL_CONSUMER = "supervisor"
CONTROL_FIELD = "request"
CONTROL_MAXLEN = 10_000  # approximate cap; requests are small and answered within a pass

REPLY_TTL_S = 86_400


def reply(request_id: str) -> str:
    return f"{PREFIX}swarm:reply:{request_id}"
