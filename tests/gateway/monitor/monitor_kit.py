"""Test support for the monitor and the search index: a real gateway (uvicorn in a thread, real Redis)
with the default plugins plus the monitor and search plugins, tuned to act within a test's patience."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, TypeVar

import httpx

from gateway.monitor.plugin import MonitorPlugin
from gateway.monitor.settings import MonitorSettings
from gateway.plugin import Plugin
from gateway.plugins import default_plugins, replace_plugins
from gateway.search.plugin import SearchPlugin
from kstest.gateway import GatewayThread

T = TypeVar("T")


def fast_monitor(**overrides: Any) -> MonitorSettings:
    """Thresholds and paces in seconds, so that a test sees a stall, a sample or a change quickly."""
    values: dict[str, Any] = {
        "stall_after_s": 3.0,
        "attention_every_s": 0.3,
        "sample_s": 0.3,
        "pr_blocked_after_s": 0.0,
        "lease_s": 5.0,
    }
    return MonitorSettings(**(values | overrides))


def monitor_plugins(settings: MonitorSettings | None = None, *extra: Plugin[Any]) -> list[Plugin[Any]]:
    return replace_plugins(
        default_plugins(), MonitorPlugin(settings or fast_monitor()), SearchPlugin(), *extra
    )


class MonitorGateway(GatewayThread):
    monitor_settings: MonitorSettings | None = None
    extra: tuple[Plugin[Any], ...] = ()

    def plugins(self) -> list[Plugin[Any]]:
        return monitor_plugins(self.monitor_settings, *self.extra)


def entry(kind: str, summary: str = "", **data: Any) -> dict[str, Any]:
    call_id = data.pop("call_id", "")
    return {"kind": kind, "ts": time.time(), "summary": summary, "data": data, "call_id": call_id}


def log_in(gw: GatewayThread, client: httpx.Client, token: str | None = None) -> str:
    """Log ``client`` in to the UI through the form (cookie session); returns the page's CSRF token."""
    reply = client.post("/ui/login", data={"token": token or gw.operator_token, "next": "/ui/chat"})
    assert reply.status_code == 303, reply.text
    page = client.get("/ui/chat", headers={"Accept": "text/html"})
    assert page.status_code == 200, page.text
    match = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert match, "no CSRF token on the page"
    return match.group(1)


def git(home: Path, token: str, name: str, *args: str, cwd: Path | None = None) -> str:
    """The git CLI as ``name`` (its token through a credential helper), isolated from the machine's config."""
    helper = f"!f() {{ echo username=x; echo password={token}; }}; f"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    argv = ["git", "-c", "credential.helper=", "-c", f"credential.helper={helper}", "-c", f"user.name={name}"]
    argv += ["-c", f"user.email={name}@agents.test", "-c", "init.defaultBranch=main", *args]
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"git {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def open_pr(gw: GatewayThread, tmp: Path, token: str, name: str, repo: str, path: str) -> tuple[int, str]:
    """A branch of ``name`` adding ``path`` to ``repo`` (org/name, created if missing) and its PR:
    (number, head sha)."""
    with gw.client(gw.operator_token) as op:
        org, _, short = repo.partition("/")
        reply = op.post("/api/forge/repos", json={"org": org, "name": short})
        assert reply.status_code in (201, 409), reply.text
    work = tmp / f"work-{name}-{path.replace('/', '-')}"
    git(tmp / "git-home", token, name, "clone", "-q", f"{gw.url}/git/{repo}.git", str(work))
    branch = f"{name}/{Path(path).stem}"
    git(tmp / "git-home", token, name, "checkout", "-q", "-b", branch, cwd=work)
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_text(f"{path} by {name}\n")
    git(tmp / "git-home", token, name, "add", path, cwd=work)
    git(tmp / "git-home", token, name, "commit", "-q", "-m", f"add {path}", cwd=work)
    git(tmp / "git-home", token, name, "push", "-q", "origin", branch, cwd=work)
    sha = git(tmp / "git-home", token, name, "rev-parse", "HEAD", cwd=work).strip()
    with httpx.Client(base_url=f"{gw.url}/api/v1", headers={"Authorization": f"token {token}"}) as api:
        body = {"head": branch, "base": "main", "title": f"Add {path}", "body": "for review"}
        reply = api.post(f"/repos/{repo}/pulls", json=body)
    assert reply.status_code == 201, reply.text
    return int(reply.json()["number"]), sha
