"""What both sides of the git layer share: one error type and one clean environment."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal


class GitError(RuntimeError):
    """A git operation that failed; the message ends with git's own last words (``stderr``)."""


def git_env(
    extra: Mapping[str, str] | None = None,
    *,
    home: Path | None = None,
    token: str | None = None,
    auth: Literal["bearer", "basic"] = "bearer",
) -> dict[str, str]:
    """A clean environment for git: no inherited ``GIT_*`` variables, no user or system config, no
    prompts, C locale. With ``token``, an HTTP ``Authorization`` header through ``GIT_CONFIG_*``
    variables (``bearer``, or ``basic`` as user ``kswarm``), so the token never appears in a command
    line (``ps``) or in a config file on disk."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    if home is not None:
        env["HOME"] = str(home)
    if token:
        if auth == "basic":
            value = "Basic " + base64.b64encode(f"kswarm:{token}".encode()).decode()
        else:
            value = f"Bearer {token}"
        env.update(
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="http.extraHeader",
            GIT_CONFIG_VALUE_0=f"Authorization: {value}",
        )
    env.update(extra or {})
    return env
