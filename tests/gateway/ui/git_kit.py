"""A real PR on the embedded forge, made with the git CLI (for the PR panel's tests and screenshots)."""

from __future__ import annotations

from pathlib import Path

import httpx

from kstest.gateway import GatewayThread
from kstest.jobkit import git


def open_demo_pr(
    gw: GatewayThread, tmp: Path, token: str, name: str = "dev-1", body: str = "fp32, n <= 1024"
) -> int:
    """Repo kswarm/kernels, a branch of ``name`` with a kernel, a PR; returns its number."""
    with gw.client(gw.operator_token) as op:
        reply = op.post("/api/forge/repos", json={"org": "kswarm", "name": "kernels"})
        assert reply.status_code == 201, reply.text
    email = f"{name}@agents.{gw.swarm}"
    work = tmp / "pr-work"
    git(tmp / "git-home", token, name, email, "clone", "-q", f"{gw.url}/git/kswarm/kernels.git", str(work))
    branch = f"{name}/softmax"
    git(tmp / "git-home", token, name, email, "checkout", "-q", "-b", branch, cwd=work)
    kernel = f"kernels/softmax/{name}_oneblock.py"
    (work / kernel).parent.mkdir(parents=True, exist_ok=True)
    (work / kernel).write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef softmax(x_ptr, y_ptr, n):\n"
        "    offs = tl.arange(0, 1024)\n    x = tl.load(x_ptr + offs, mask=offs < n, other=-float('inf'))\n"
        "    e = tl.exp(x - tl.max(x, 0))\n    tl.store(y_ptr + offs, e / tl.sum(e, 0), mask=offs < n)\n"
    )
    git(tmp / "git-home", token, name, email, "add", kernel, cwd=work)
    git(tmp / "git-home", token, name, email, "commit", "-q", "-m", "softmax: one-block kernel", cwd=work)
    git(tmp / "git-home", token, name, email, "push", "-q", "origin", branch, cwd=work)
    with httpx.Client(base_url=f"{gw.url}/api/v1", headers={"Authorization": f"token {token}"}) as api:
        body = {
            "head": branch,
            "base": "main",
            "title": "Softmax: one-block kernel",
            "body": body,
        }
        reply = api.post("/repos/kswarm/kernels/pulls", json=body)
    assert reply.status_code == 201, reply.text
    return reply.json()["number"]
