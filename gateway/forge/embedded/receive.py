"""The receive check: git's pre-receive and post-receive hooks of every embedded-forge repository.

Run as ``python -I -S receive.py pre-receive|post-receive`` by the hook scripts the gateway writes
into each bare repository (standard library only: it starts with a bare interpreter). The gateway's
smart-HTTP route runs ``git http-backend`` with the authenticated pusher in the environment:

- ``REMOTE_USER``            the pusher (principal name, from the token)
- ``KSWARM_PUSHER_EMAIL``    the e-mail every pushed commit must carry as author and committer
- ``KSWARM_PUSHER_KIND``     agent, operator, worker or gate
- ``KSWARM_PROTECTED``       comma-separated protected branch names (only the gate merges there)
- ``KSWARM_PUSH_LOG``        file the post-receive hook appends accepted updates to
- ``KSWARM_MAX_BLOB_BYTES``, ``KSWARM_MAX_FILES``, ``KSWARM_MAX_BRANCHES``  the push limits
  (``ForgeSettings.push_env``; 0: no limit; unset or unreadable: the defaults below)

pre-receive rejects the whole push, naming the offending commit, when: a new commit's author or
committer e-mail is not the pusher's; an agent updates a ref outside ``refs/heads/<agent>/``; any
pusher updates a protected branch; a ref the pusher does not own is rewound or deleted. Before those,
the push limits: a new blob larger than the blob limit, more changed paths than the file limit, or
more branches owned by the pusher than the branch limit. (The pack size limit and the object check
are git's own, ``receive.maxInputSize`` and ``receive.fsckObjects``: they refuse before any hook.)
"""

from __future__ import annotations

import os
import subprocess
import sys

ZERO = "0" * 40
MAX_REPORTED = 10
MIB = 1024 * 1024
# the defaults of ForgeSettings (the hook imports nothing of the gateway); the setting each names
LIMITS = {
    "KSWARM_MAX_BLOB_BYTES": (4 * MIB, "KSWARM_FORGE_PUSH_MAX_BLOB_BYTES"),
    "KSWARM_MAX_FILES": (500, "KSWARM_FORGE_PUSH_MAX_FILES"),
    "KSWARM_MAX_BRANCHES": (100, "KSWARM_FORGE_MAX_BRANCHES_PER_AGENT"),
}


def git(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], input=stdin, capture_output=True, text=True, check=False)


def limit(var: str) -> int:
    """The limit in ``var``; its default when unset or not a number (never none by mistake)."""
    default = LIMITS[var][0]
    try:
        value = int(os.environ.get(var, ""))
    except ValueError:
        return default
    return value if value >= 0 else default


def git_ok(*args: str, stdin: str | None = None) -> str:
    out = git(*args, stdin=stdin)
    if out.returncode != 0:
        raise RuntimeError(f"git {args[0]}: {out.stderr.strip()}")
    return out.stdout


def check_limits(updates: list[tuple[str, str, str]], pusher: str, kind: str) -> list[str]:
    """The push limits (operators are exempt: the gateway gives them none). Cheap: a few git
    commands for the whole push, whatever its number of refs or commits."""
    if kind == "operator":
        return []
    errors: list[str] = []
    max_branches, max_blob, max_files = (
        limit("KSWARM_MAX_BRANCHES"),
        limit("KSWARM_MAX_BLOB_BYTES"),
        limit("KSWARM_MAX_FILES"),
    )
    own = f"refs/heads/{pusher}/"
    created = {ref for old, new, ref in updates if old == ZERO and new != ZERO and ref.startswith(own)}
    if max_branches and created:
        deleted = {ref for _, new, ref in updates if new == ZERO}
        existing = set(git_ok("for-each-ref", "--format=%(refname)", own).split())
        total = len((existing - deleted) | created)
        if total > max_branches:
            errors.append(
                f"{len(created)} new branch(es): {pusher} would own {total} branches in this repo, over "
                f"the limit of {max_branches} per agent ({LIMITS['KSWARM_MAX_BRANCHES'][1]}); delete "
                f"merged ones first (git push origin --delete {pusher}/<branch>)"
            )
    news = "".join(f"{new}\n" for _, new, _ in updates if new != ZERO)
    if not news:
        return errors
    if max_blob:
        listed = git_ok("rev-list", "--objects", "--stdin", "--not", "--all", stdin=news)
        paths = dict(line.partition(" ")[::2] for line in listed.splitlines() if line)
        sizes = git_ok(
            "cat-file",
            "--batch-check=%(objectname) %(objecttype) %(objectsize)",
            stdin="".join(f"{s}\n" for s in paths),
        )
        for line in sizes.splitlines():
            sha, kind_, size = line.split(" ")
            if kind_ == "blob" and int(size) > max_blob:
                errors.append(
                    f"blob {sha[:10]} ({paths.get(sha) or '?'}): {int(size):,} bytes, over the limit of "
                    f"{max_blob:,} bytes per file ({LIMITS['KSWARM_MAX_BLOB_BYTES'][1]}); keep large "
                    "data out of the repository"
                )
    if max_files:
        changed = git_ok(
            "log", "--format=", "--name-only", "--no-renames", "-z", "--stdin", "--not", "--all", stdin=news
        )
        files = {p.strip("\n") for p in changed.split("\0")} - {""}
        if len(files) > max_files:
            errors.append(
                f"the pushed commits change {len(files):,} files, over the limit of {max_files:,} per push "
                f"({LIMITS['KSWARM_MAX_FILES'][1]}); push smaller changes"
            )
    return errors


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
        # the limits first: a push over them is refused before the per-ref checks spend on it
        errors = check_limits(updates, pusher, kind) or check(updates, pusher, email, kind, protected)
    except Exception as exc:  # a broken check must reject, never accept
        errors = [f"receive check failed: {exc}"]
    if errors:
        print(f"kswarm: push by {pusher} rejected:", file=sys.stderr)
        for error in errors[:MAX_REPORTED]:
            print(f"kswarm:   rejected {error}", file=sys.stderr)
        if len(errors) > MAX_REPORTED:
            print(f"kswarm:   ... and {len(errors) - MAX_REPORTED} more", file=sys.stderr)
        if any("e-mail" in error for error in errors):
            print(f"kswarm: commit as: git config user.email {email}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
