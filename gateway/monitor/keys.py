"""Redis names of the monitor (under the gateway's ``ks:`` prefix).

| key | type | content |
|---|---|---|
| ``ks:mon:lease`` | string, TTL | the feeder's owner (one replica feeds at a time) |
| ``ks:mon:cursor`` | string | the last ``ks:events`` entry the feeder counted |
| ``ks:mon:started`` | string | unix time the feeder first fed (the swarm's age, for charts) |
| ``ks:mon:s:<series>:<day>`` | hash, TTL | minute of the UTC day -> value (counters and gauges) |
| ``ks:mon:series`` | sorted set | series name -> last write (unix time) |
| ``ks:mon:usage-last`` | hash | ``<agent>:tokens`` / ``<agent>:nusd``: the usage last sampled |
| ``ks:mon:cost`` | hash | ``<task>|<agent>|tokens`` / ``...|nusd``: usage attributed to tasks, all time |
| | | (and ``@spent-cursor``: the last ``ks:llm:spent`` entry booked) |
| ``ks:mon:spent:<task>|<agent>`` | sorted set | each booked call (``<entry> <tokens> <nusd>``) by its time |
| ``ks:mon:claims-open`` | hash | task -> the claim window seen open (JSON) |
| ``ks:mon:claims`` | stream | closed claim windows: task, agent, since, until, how |
| ``ks:mon:audit-seen`` | hash | ``<repo>#<n>`` -> the last gate decision time counted |
| ``ks:mon:attention`` | string | the digest of the last Attention list announced |
| ``ks:mon:ack`` | hash | Attention item key -> unix time an operator dismissed it |
| ``ks:mon:alerted`` | hash | Attention item key -> the severity it was last alerted at (``alerts``) |
| ``ks:mon:actions`` | stream | operator actions: who, what, target, outcome |
| ``ks:mon:forge-cursor`` | string | the last ``ks:forge:events`` entry read (pushes) |
| ``ks:mon:heads:<repo>:<branch>`` | list | its heads as pushed: ``{sha, old, ts, actor}`` (last 200) |
| ``ks:timeline:<agent>`` | stream | the agent's timeline entries (``json``) |
"""

from gateway.keys import PREFIX

LEASE = f"{PREFIX}mon:lease"
CURSOR = f"{PREFIX}mon:cursor"
STARTED = f"{PREFIX}mon:started"
SERIES_INDEX = f"{PREFIX}mon:series"
USAGE_LAST = f"{PREFIX}mon:usage-last"
# A field of USAGE_LAST (no agent name has an @): the feeder's last usage sample; present once it watches.
USAGE_WATCHING = "@watching"
COST = f"{PREFIX}mon:cost"
# A field of COST (no task name has an @): the last ``ks:llm:spent`` entry booked, written in the same
# transaction as what it booked (so a call is booked once, whichever replica feeds).
SPENT_CURSOR = "@spent-cursor"
CLAIMS_OPEN = f"{PREFIX}mon:claims-open"
CLAIMS = f"{PREFIX}mon:claims"
AUDIT_SEEN = f"{PREFIX}mon:audit-seen"
ATTENTION = f"{PREFIX}mon:attention"
ACK = f"{PREFIX}mon:ack"
ALERTED = f"{PREFIX}mon:alerted"
ACTIONS = f"{PREFIX}mon:actions"
CLAIMS_MAXLEN = 10_000
FORGE_CURSOR = f"{PREFIX}mon:forge-cursor"
HEADS_KEPT = 200


def spent(task: str, agent: str) -> str:
    return f"{PREFIX}mon:spent:{task}|{agent}"  # zset: "<entry id> <tokens> <nusd>" by the call's time


def heads(repo: str, branch: str) -> str:
    return f"{PREFIX}mon:heads:{repo}:{branch}"


def series(name: str, day: int) -> str:
    return f"{PREFIX}mon:s:{name}:{day}"


def timeline(agent: str) -> str:
    return f"{PREFIX}timeline:{agent}"
