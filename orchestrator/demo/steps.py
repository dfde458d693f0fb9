"""Building blocks of the demo policy: keyed plans, tool-result parsing, the texts agents exchange, and
the git commands a scripted developer runs.

The scripted model is stateless: on every model call it rebuilds the plan from the wake's events and
replays it against the calls already made. A ``Flow`` is one rule's plan whose steps can read the
results of its own earlier steps by key, so that two rules in one wake (two job results, say) never
read each other's results.
"""

from __future__ import annotations

import json
import re
import shlex
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.models.scripted import Call, Scratch, Step
from gateway.tasks import catalogue

# Texts the platform and the demo agents write; the policy reads them back with these patterns.
JOB_DM_RE = re.compile(r"^job (j[0-9a-f]+) \((\S+), (\S+) @ ([0-9a-f]+), pool (\S+)\): (\w+)")
REVIEW_PING_RE = re.compile(r"PR #(\d+)\b.*?\bjob (j[0-9a-f]+)", re.S)
CHANGES_RE = re.compile(r"changes requested on PR #(\d+)")
REVIEW_REQUEST_RE = re.compile(r"asks for your review of (\S+?)#(\d+)")
MERGED_RE = re.compile(r"(\S+?)#(\d+) .* merged into (\S+) as ([0-9a-f]+)", re.S)
KICKOFF_RE = re.compile(r"^Kick-off\b")
# A developer's word to the red team after a merge, and what tells the author a kernel was withdrawn.
ATTACK_RE = re.compile(r"merged (kernels/([a-z0-9_.-]+)/\S+\.py) at ([0-9a-f]{40}) \(PR #(\d+)\)")
WITHDRAWN_RE = re.compile(r"withdrawn\b.*?\b(kernels/([a-z0-9_.-]+)/\S+?\.py)", re.S | re.I)
REGRESSION_FILE_RE = re.compile(r"^tasks/[a-z0-9][a-z0-9_.-]*/regressions/[^/]+\.json$")
DIFF_PATH_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
HEAD_RE = re.compile(r"^HEAD ([0-9a-f]{40})$", re.M)
LIST_RE = r"{label}:\s*([^.\n]*)"


def parse_json(raw: str | None) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def names_after(text: str, label: str) -> list[str]:
    """``Tasks: add, relu.`` -> ["add", "relu"]; ``@`` and backticks are dropped."""
    found = re.search(LIST_RE.format(label=re.escape(label)), text, re.I)
    if not found:
        return []
    return [n.strip(" `@") for n in re.split(r"[,\s]+", found.group(1)) if n.strip(" `@")]


@dataclass(frozen=True)
class DemoPolicy:
    """What the demo agents agree on; the orchestrator passes it in ``KSWARM_DEMO_*`` variables."""

    repo: str = "kswarm/dataset"
    pool: str = "cpu"
    reviewers: tuple[str, ...] = ()
    faulty: frozenset[str] = field(default_factory=lambda: frozenset(catalogue.wrong_solution_names()))
    max_claims: int = 40
    red_team: tuple[str, ...] = ()
    # Tasks the red team attacks, and whose kernel is first the catalogue's unstable one when there is
    # a red team to break it (catalogue.unstable_solution_names): right on ordinary inputs, wrong on a
    # special value of the task's domain.
    attack: frozenset[str] = field(default_factory=lambda: frozenset(catalogue.unstable_solution_names()))

    def unstable(self, task: str) -> bool:
        return (
            bool(self.red_team) and task in self.attack and catalogue.unstable_solution_path(task).is_file()
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DemoPolicy:
        def listed(name: str) -> tuple[str, ...]:
            return tuple(x for x in env.get(name, "").replace(",", " ").split() if x)

        faulty = env.get("KSWARM_DEMO_FAULTY")
        given: dict[str, Any] = (
            {"faulty": frozenset(listed("KSWARM_DEMO_FAULTY"))} if faulty is not None else {}
        )
        if env.get("KSWARM_DEMO_ATTACK") is not None:
            given["attack"] = frozenset(listed("KSWARM_DEMO_ATTACK"))
        return cls(
            repo=env.get("KSWARM_DEMO_REPO", cls.repo),
            pool=env.get("KSWARM_DEMO_POOL", cls.pool),
            reviewers=listed("KSWARM_DEMO_REVIEWERS"),
            red_team=listed("KSWARM_DEMO_RED_TEAM"),
            **given,
        )

    def reviewer_for(self, task: str, author: str) -> list[str]:
        """One reviewer per task, spread over the reviewers by a stable hash; never the author."""
        pool = [r for r in self.reviewers if r != author]
        return [pool[zlib.crc32(task.encode()) % len(pool)]] if pool else []


@dataclass
class Flow:
    """One rule's steps; ``result(s, key)`` is the result of this flow's step named ``key``."""

    steps: list[Step] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, make: Callable[[Scratch], Call | None]) -> None:
        def step(s: Scratch) -> Call | None:
            call = make(s)
            if call is not None:
                self.index[key] = len(s.calls)  # the position this call takes in the wake
            return call

        self.steps.append(step)

    def made(self, s: Scratch, key: str) -> bool:
        i = self.index.get(key)
        return i is not None and i < len(s.results)

    def result(self, s: Scratch, key: str) -> str | None:
        i = self.index.get(key)
        return s.results[i] if i is not None and i < len(s.results) else None

    def data(self, s: Scratch, key: str) -> Any:
        return parse_json(self.result(s, key))


def changed_paths(diff: str) -> list[str]:
    """The files a unified diff (``pr_view`` with ``diff``) changes."""
    return sorted({b for _, b in DIFF_PATH_RE.findall(diff)})


def me(s: Scratch) -> str:
    """Our name as the gateway says it (``whoami``), never as configured."""
    return str((s.identity() or {}).get("name", ""))


# -- git, run by the agent's own bash in its work dir --------------------------------------------


def clone_dir(repo: str) -> str:
    return repo.rsplit("/", 1)[-1]


def checkout_command(repo: str, branch: str) -> str:
    """Clone the repo once (over the agent's loopback bridge), then start ``branch`` afresh from main.

    A fix is a fresh commit on main force-pushed to the agent's own branch, so that a rejected
    kernel never becomes part of main's history when the PR is merged."""
    url = f'"$KSWARM_GIT_URL"/{shlex.quote(repo)}.git'
    where = shlex.quote(clone_dir(repo))
    return "\n".join(
        [
            "set -e",
            f"[ -d {where}/.git ] || git clone -q {url} {where}",
            f"cd {where}",
            "git fetch -q origin",
            f"git checkout -q -B {shlex.quote(branch)} origin/main",
            "git log -1 --format='base %H'",
        ]
    )


def commit_push_command(repo: str, identity: dict[str, Any], path: str, message: str, branch: str) -> str:
    """Commit ``path`` as ourselves (name and e-mail from ``whoami``) and push our own branch."""
    name = shlex.quote(str(identity.get("name", "")))
    email = shlex.quote(str(identity.get("email", "")))
    return "\n".join(
        [
            "set -e",
            f"cd {shlex.quote(clone_dir(repo))}",
            f"git add -- {shlex.quote(path)}",
            f"git -c user.name={name} -c user.email={email} commit -q -m {shlex.quote(message)}",
            f"git push -q -f origin HEAD:refs/heads/{shlex.quote(branch)}",
            'echo "HEAD $(git rev-parse HEAD)"',
        ]
    )


def pushed_sha(raw: str | None) -> str | None:
    found = HEAD_RE.findall(raw or "")
    return found[-1] if found else None


def flags_text(job: dict[str, Any]) -> str:
    """``mismatch (20/30 trial(s) failed: mismatch)`` or the job's state when it has no flags."""
    flags = ", ".join(job.get("flags") or [])
    reasons = "; ".join(job.get("reasons") or []) or job.get("error") or ""
    head = flags or str(job.get("verdict") or job.get("state") or "no result")
    return f"{head} ({reasons})" if reasons else head
