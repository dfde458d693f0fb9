"""Redis key names of the forge and the gate (prefix ``ks:forge:``)."""

PREFIX = "ks:forge:"

REPOS = f"{PREFIX}repos"  # hash full_name -> RepoInfo json
ORGS = f"{PREFIX}orgs"  # set of org names
EVENTS = f"{PREFIX}events"  # stream the gate consumes
GATE_GROUP = "gate"
REVIEW_SEQ = f"{PREFIX}seq:review"
STATUS_SEQ = f"{PREFIX}seq:status"
COMMENT_SEQ = f"{PREFIX}seq:comment"
TOKEN_SEQ = f"{PREFIX}seq:token"


def pr_seq(repo: str) -> str:
    return f"{PREFIX}pr-seq:{repo}"


def pr(repo: str, number: int) -> str:
    return f"{PREFIX}pr:{repo}:{number}"


def pr_index(repo: str) -> str:
    return f"{PREFIX}prs:{repo}"  # sorted set of PR numbers


def reviews(repo: str, number: int) -> str:
    return f"{PREFIX}reviews:{repo}:{number}"  # hash id -> Review json


def comments(repo: str, number: int) -> str:
    return f"{PREFIX}comments:{repo}:{number}"  # list of Comment json


def statuses(repo: str, sha: str) -> str:
    return f"{PREFIX}status:{repo}:{sha}"  # hash context -> CommitStatus json (latest)


def protections(repo: str) -> str:
    return f"{PREFIX}protect:{repo}"  # hash branch -> ReviewPolicy json


def collaborators(repo: str) -> str:
    return f"{PREFIX}collab:{repo}"  # hash user -> permission


def password(user: str) -> str:
    return f"{PREFIX}password:{user}"  # salted hash, for Gitea-style Basic token creation


def verifications(repo: str, sha: str) -> str:
    return f"{PREFIX}verify:{repo}:{sha}"  # hash job id -> Verification json (gateway/forge/gate/evidence.py)


def audit(repo: str, number: int) -> str:
    return f"{PREFIX}audit:{repo}:{number}"  # list of decision json, newest last


def announced(repo: str, number: int) -> str:
    return f"{PREFIX}announced:{repo}:{number}"  # fingerprint of the last block announced


def merge_lock(repo: str, base: str) -> str:
    return f"{PREFIX}lock:{repo}:{base}"
