"""The forge's one check of every name a client hands it: orgs and repositories, branches, refs, file
paths, user names. Each raises a ``ForgeError`` naming what it checked (its status is the caller's:
422 for a field of a body, as Gitea answers, 400 for a parameter of a path or a query), so bad input is
refused before it reaches git (whose argv cannot hold a NUL, and which reads a leading ``-`` as an
option) or Redis. Patterns are matched whole (``fullmatch``: a ``$`` would let a trailing newline in).
"""

from __future__ import annotations

import re

from gateway.errors import ForgeError
from gateway.git.aio import check_tree_path
from gateway.principals import NAME_RE

REPO_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
BRANCH_RE = re.compile(r"(?!/)(?!.*//)(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/-]{1,200}(?<![/.])")
# A revision a route may resolve: a branch or tag name (no leading '-': git would read an option) or a
# commit sha, full or abbreviated; never git's revision syntax (``^``, ``~``, ``:``, ``@{``, ``..``).
REF_RE = re.compile(r"(?![-/])(?!.*//)(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/-]{1,255}(?<![/.])")
SHA_RE = re.compile(r"[0-9a-f]{40}")
MAX_PATH = 4096  # bytes of a path in the repository (Linux's PATH_MAX)


def check_name(value: str, what: str, status: int = 422) -> None:
    """An org or repository name (``what`` names which)."""
    if not REPO_NAME_RE.fullmatch(value) or value.endswith(".git"):
        raise ForgeError(
            f"bad {what} name {value[:120]!r}: 1-100 of A-Z a-z 0-9 . _ -, starting with a letter or "
            "digit, not ending in .git",
            status,
        )


def check_branch(value: str, what: str = "branch", status: int = 422) -> None:
    if not BRANCH_RE.fullmatch(value) or value.endswith(".lock"):
        raise ForgeError(f"bad {what} name {value[:120]!r}", status)


def check_ref(value: str, what: str = "ref", status: int = 400) -> None:
    """A branch, tag or commit sha to resolve."""
    if not REF_RE.fullmatch(value) or value.endswith(".lock"):
        raise ForgeError(f"{what}: {value[:120]!r} is not a branch, tag or commit sha", status)


def check_path(value: str, what: str = "path", status: int = 422, allow_root: bool = False) -> None:
    """A path inside the repository: relative, normalised (no ``.``, ``..`` or empty part), never into
    ``.git``, no NUL, newline or backslash, at most ``MAX_PATH`` bytes. ``allow_root``: the empty path
    (a listing of the top) is one too; leading and trailing slashes are the caller's to strip."""
    if allow_root and value == "":
        return
    try:
        check_tree_path(value)
    except ValueError:
        raise ForgeError(
            f"{what}: {value[:120]!r} is not a relative path inside the repository", status
        ) from None
    if len(value.encode()) > MAX_PATH:
        raise ForgeError(f"{what}: longer than {MAX_PATH} bytes", status)


def check_user(value: str, what: str = "username", status: int = 400) -> None:
    """A principal's name (a forge user is a principal)."""
    if not NAME_RE.fullmatch(value):
        raise ForgeError(f"{what}: {value[:120]!r} is not a user name (a-z, 0-9 and -, 1-39)", status)


MAX_TITLE = 256  # characters of a PR's title (Gitea's own limit is 255 bytes)
MAX_TEXT = 64 * 1024  # characters of a PR's body, a review or a comment: every reader loads it whole


def check_text(title: str | None = None, body: str | None = None, what: str = "body") -> None:
    """A PR's title (one line, at most ``MAX_TITLE``) and a body, review or comment (``what``; at most
    ``MAX_TEXT``): what one agent writes, everyone's pages and the monitor's feed load."""
    if title is not None and (len(title) > MAX_TITLE or "\n" in title):
        raise ForgeError(f"title: one line of at most {MAX_TITLE} characters (got {len(title)})", 422)
    if body is not None and len(body) > MAX_TEXT:
        raise ForgeError(f"{what}: {len(body)} characters; the limit is {MAX_TEXT}", 413)
