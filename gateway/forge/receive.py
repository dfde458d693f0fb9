"""The receive check: git's pre-receive and post-receive hooks of every embedded-forge repository.

Run as ``python -I -S receive.py pre-receive|post-receive`` by the hook scripts the gateway writes
into each bare repository (standard library only: it starts with a bare interpreter). The gateway's
smart-HTTP route runs ``git http-backend`` with the authenticated pusher in the environment:

- ``REMOTE_USER``            the pusher (principal name, from the token)
- ``KSWARM_PUSHER_EMAIL``    the e-mail every pushed commit must carry as author and committer
- ``KSWARM_PUSHER_KIND``     agent, operator, worker or gate
- ``KSWARM_PROTECTED``       comma-separated protected branch names (only the gate merges there)
- ``KSWARM_PUSH_LOG``        file the post-receive hook appends accepted updates to

pre-receive rejects the whole push, naming the offending commit, when: a new commit's author or
committer e-mail is not the pusher's; an agent updates a ref outside ``refs/heads/<agent>/``; any
pusher updates a protected branch; a ref the pusher does not own is rewound or deleted.
"""

from __future__ import annotations

import os
import subprocess
import sys

ZERO = "0" * 40
MAX_REPORTED = 10


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False)


def owner_of(ref: str) -> str | None:
    """``refs/heads/<name>/...`` belongs to ``<name>``; anything else belongs to nobody."""
    if not ref.startswith("refs/heads/"):
        return None
    branch = ref[len("refs/heads/") :]
    return branch.split("/", 1)[0] if "/" in branch else None


def new_commits(new: str) -> list[tuple[str, str, str]]:
    """(sha, author e-mail, committer e-mail) of commits in ``new`` that no existing ref reaches."""
    out = git("log", "--format=%H%x00%ae%x00%ce", new, "--not", "--all")
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    rows = []
    for line in out.stdout.splitlines():
        sha, author, committer = line.split("\x00")
        rows.append((sha, author, committer))
    return rows


def check(
    updates: list[tuple[str, str, str]], pusher: str, email: str, kind: str, protected: set[str]
) -> list[str]:
    errors: list[str] = []
    own_prefix = f"refs/heads/{pusher}/"
    for old, new, ref in updates:
        target = new[:10] if new != ZERO else "(delete)"
        branch = ref[len("refs/heads/") :] if ref.startswith("refs/heads/") else None
        if branch is not None and branch in protected:
            errors.append(
                f"{target} -> {ref}: {branch} is protected; only the review gate merges into it (open a PR)"
            )
            continue
        if kind == "agent" and not ref.startswith(own_prefix):
            errors.append(f"{target} -> {ref}: agent {pusher} may push only under {own_prefix}...")
            continue
        if old != ZERO and owner_of(ref) != pusher:
            if new == ZERO:
                errors.append(f"{target} -> {ref}: {pusher} may not delete a ref it does not own")
                continue
            if git("merge-base", "--is-ancestor", old, new).returncode != 0:
                errors.append(
                    f"{target} -> {ref}: non-fast-forward update of a ref {pusher} does not own "
                    f"(was {old[:10]})"
                )
                continue
        if new == ZERO:
            continue
        for sha, author, committer in new_commits(new):
            if author.lower() != email.lower():
                errors.append(
                    f"commit {sha[:10]} ({ref}): author e-mail <{author}> is not the pusher's <{email}>"
                )
            if committer.lower() != email.lower():
                errors.append(
                    f"commit {sha[:10]} ({ref}): committer e-mail <{committer}> is not the pusher's <{email}>"
                )
    return errors


def read_updates() -> list[tuple[str, str, str]]:
    updates = []
    for line in sys.stdin.read().splitlines():
        parts = line.split()
        if len(parts) == 3:
            updates.append((parts[0], parts[1], parts[2]))
    return updates


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else "pre-receive"
    updates = read_updates()
    if mode == "post-receive":
        log = os.environ.get("KSWARM_PUSH_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.writelines(f"{old} {new} {ref}\n" for old, new, ref in updates)
        return 0
    pusher = os.environ.get("REMOTE_USER", "")
    email = os.environ.get("KSWARM_PUSHER_EMAIL", "")
    kind = os.environ.get("KSWARM_PUSHER_KIND", "")
    if not pusher or not email or not kind:
        print("kswarm: rejected: no authenticated pusher (push through the gateway)", file=sys.stderr)
        return 1
    protected = {b for b in os.environ.get("KSWARM_PROTECTED", "").split(",") if b}
    try:
        errors = check(updates, pusher, email, kind, protected)
    except Exception as exc:  # a broken check must reject, never accept
        errors = [f"receive check failed: {exc}"]
    if errors:
        print(f"kswarm: push by {pusher} rejected:", file=sys.stderr)
        for error in errors[:MAX_REPORTED]:
            print(f"kswarm:   rejected {error}", file=sys.stderr)
        if len(errors) > MAX_REPORTED:
            print(f"kswarm:   ... and {len(errors) - MAX_REPORTED} more", file=sys.stderr)
        print(f"kswarm: commit as: git config user.email {email}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
