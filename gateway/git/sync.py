"""The synchronous side of the git layer, on GitPython: one exact sha checked out, a repo mirrored.

Every call runs git with ``core.git_env`` (the token as an HTTP header through the environment) and
has a time limit; any failure is a ``GitError`` with git's last words. Async callers (the worker)
run these in a thread.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import git

from gateway.git.core import GitError, git_env


def _failed(what: str, exc: Exception) -> GitError:
    detail = exc.stderr if isinstance(exc, git.GitCommandError) else str(exc)
    return GitError(f"git {what} failed: {str(detail).strip()[-500:]}")


def checkout_at(clone_url: str, sha: str, dest: Path, token: str | None = None, limit_s: float = 120) -> None:
    """Clone ``clone_url`` into ``dest`` (which must not exist) at exactly ``sha``, then delete
    ``.git``: a plain tree of that commit and nothing else (no other refs, no history, no remote)."""
    home = dest.parent / ".git-home"
    home.mkdir(parents=True, exist_ok=True)
    env = git_env(home=home, token=token)
    try:
        try:
            repo = git.Repo.clone_from(
                clone_url, dest, env=env, no_checkout=True, quiet=True, kill_after_timeout=limit_s
            )
        except (git.GitCommandError, OSError) as exc:
            raise _failed("clone", exc) from None
        try:
            with repo.git.custom_environment(**env):
                repo.git.execute(
                    ["git", "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", sha],
                    kill_after_timeout=limit_s,
                )
            head = repo.head.commit.hexsha
        except (git.GitCommandError, ValueError) as exc:
            raise _failed("checkout", exc) from None
        finally:
            repo.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if head != sha:
        raise GitError(f"checked out {head}, expected {sha}")
    shutil.rmtree(dest / ".git")


class Mirror:
    """A bare mirror of a repository (every ref, agents' branches included), read with GitPython."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.repo = git.Repo(path)

    @classmethod
    def fetch(cls, clone_url: str, token: str, path: Path, limit_s: float = 300) -> Mirror:
        """Create ``path`` as a mirror of ``clone_url``, or bring an existing one up to date."""
        env = git_env(home=path.parent, token=token)
        try:
            if (path / "HEAD").is_file():
                repo = git.Repo(path)
                with repo.git.custom_environment(**env):
                    repo.git.fetch("-q", "--prune", "origin", "+refs/*:refs/*", kill_after_timeout=limit_s)
                repo.close()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                git.Repo.clone_from(
                    clone_url, path, env=env, mirror=True, quiet=True, kill_after_timeout=limit_s
                ).close()
        except (git.GitCommandError, OSError) as exc:
            raise _failed("fetch", exc) from None
        return cls(path)

    def close(self) -> None:
        self.repo.close()

    def branch_sha(self, branch: str) -> str | None:
        try:
            return self.repo.commit(f"refs/heads/{branch}").hexsha
        except (ValueError, git.BadName, git.BadObject):
            return None

    def has(self, sha: str) -> bool:
        try:
            self.repo.commit(sha)
        except (ValueError, git.BadName, git.BadObject):
            return False
        return True

    def author_email(self, sha: str) -> str | None:
        try:
            return self.repo.commit(sha).author.email or None
        except (ValueError, git.BadName, git.BadObject):
            return None

    def file_at(self, sha: str, path: str) -> bytes | None:
        """The bytes of ``path`` at ``sha``, or None (no such commit or file, or not a file)."""
        try:
            blob = self.repo.commit(sha).tree / path
        except (ValueError, KeyError, git.BadName, git.BadObject):
            return None
        return blob.data_stream.read() if blob.type == "blob" else None

    def commits_between(self, base: str | None, head: str | None) -> list[str]:
        """Commits reachable from ``head`` but not from ``base`` (a PR's own commits), newest first."""
        if not head or not self.has(head):
            return []
        rev = f"{base}..{head}" if base and self.has(base) else head
        return [c.hexsha for c in self.repo.iter_commits(rev)]
