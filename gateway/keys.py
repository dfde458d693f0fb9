"""Redis key names, in one place so that every component agrees on them."""

PREFIX = "ks:"


def principal(name: str) -> str:
    return f"{PREFIX}principal:{name}"


PRINCIPALS = f"{PREFIX}principals"


def token(token_hash: str) -> str:
    return f"{PREFIX}token:{token_hash}"


def principal_tokens(name: str) -> str:
    return f"{PREFIX}principal-tokens:{name}"


CHANNELS = f"{PREFIX}channels"


def channel_stream(channel: str) -> str:
    return f"{PREFIX}chan:{channel}:stream"


def channels_created(name: str) -> str:
    """How many channels agent ``name`` has created (its budget: max_channels_per_agent)."""
    return f"{PREFIX}channels_by:{name}"


def channel_members(channel: str) -> str:
    return f"{PREFIX}chan:{channel}:members"


def thread_index(channel: str, root_id: str) -> str:
    return f"{PREFIX}chan:{channel}:thread:{root_id}"


def inbox(name: str) -> str:
    return f"{PREFIX}inbox:{name}"


def cursors(name: str) -> str:
    return f"{PREFIX}cursors:{name}"


def rate(name: str) -> str:
    return f"{PREFIX}rate:{name}"


def heartbeat(name: str) -> str:
    return f"{PREFIX}heartbeat:{name}"


EVENTS = f"{PREFIX}events"
# string: the last message id the post script wrote (gateway/chat_scripts.py), so that the next one is
# taken after it without reading every stream's last-generated id
MESSAGE_SEQUENCE = f"{PREFIX}message-sequence"


def dedupe(sender: str, key: str) -> str:
    return f"{PREFIX}dedupe:{sender}:{key}"  # string: the id a deduplicated post was accepted under


# stream: one entry per write that someone may be waiting for, naming its topics (``to``: comma-joined,
# e.g. ``inbox:alice``); the gateway's event hub is its one reader and wakes the waiters of each topic.
WAKE = f"{PREFIX}wake"
WAKE_MAXLEN = 100_000  # approximate length cap of the wake-up stream (the hub reads it as it grows)


def inbox_topic(name: str) -> str:
    return f"inbox:{name}"  # the wake-up topic of a principal's inbox


# Token cache invalidation (gateway/auth_changes.py): every change to a principal or a token bumps the
# version and publishes it on the channel; each replica acks on the ack channel once its cache is clean,
# and keeps its lease (the Redis time until which it may use its cache, ms) in the replicas hash.
AUTH_VERSION = f"{PREFIX}auth:version"
AUTH_CHANGED = f"{PREFIX}auth:changed"
AUTH_ACKS = f"{PREFIX}auth:acks"
AUTH_REPLICAS = f"{PREFIX}auth:replicas"
