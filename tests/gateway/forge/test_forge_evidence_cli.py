"""Evidence levels where people read them: ``kswarm pr why``, the ``kswarm/`` statuses and the policy API.

A real gateway with the gate (``forge_gw``); verification records written the way the job runner writes
them (``Swarm.verify``). A cpu-shapes-only pass blocks under the default policy, ``pr why`` names the
kernel's level and the level required, the statuses say ``pass (cpu-shapes-only); cpu-screened
required``; a cpu-screened pass merges it; a device requirement waits for the device pool's pass.
"""

from __future__ import annotations

import json
import time

from forgekit import Swarm
from test_forge_cli import cli

KERNEL = "kernels/add/alice_k.py"


def status_descriptions(swarm: Swarm, sha: str) -> dict[str, tuple[str, str]]:
    """context -> (state, description) of the latest statuses on ``sha``."""
    with swarm.api("operator") as api:
        combined = api.get(f"/repos/{swarm.full}/commits/{sha}/status").json()
    return {s["context"]: (s["status"], s["description"]) for s in combined["statuses"]}


def test_pr_why_and_statuses_say_the_level_and_what_is_required(swarm: Swarm) -> None:
    _, _, sha = swarm.push_branch("alice", "alice/levels", KERNEL, "k\n")
    number = swarm.open_pr("alice", "alice/levels")
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    since = time.time()
    weak = swarm.verify(sha, KERNEL, "pass", evidence="cpu-shapes-only")
    swarm.wait_decision(number, since, {"kernel-evidence"})

    code, out = cli(swarm, "pr", "why", str(number), "--repo", swarm.full)
    assert code == 0, out
    assert "BLOCKED" in out and "(kernel-evidence)" in out
    assert f"{KERNEL} at {sha[:10]} has cpu-shapes-only evidence" in out
    assert "evidence: cpu-shapes-only insufficient: the policy requires cpu-screened" in out
    assert f"job {weak} by @alice: pass (cpu-shapes-only)" in out
    code, out = cli(swarm, "pr", "why", str(number), "--repo", swarm.full, "--json")
    [kernel] = json.loads(out)["gate"]["kernels"]
    assert (kernel["evidence"], kernel["required_evidence"]) == ("cpu-shapes-only", "cpu-screened")

    per_kernel = "kswarm/verify:cpu/add/alice_k.py"
    statuses = status_descriptions(swarm, sha)
    assert statuses[per_kernel][0] == "failure"
    assert statuses[per_kernel][1].startswith("pass (cpu-shapes-only); cpu-screened required")
    assert statuses["kswarm/verify:cpu"][0] == "failure"
    assert statuses["kswarm/verify:cpu"][1].startswith("insufficient evidence (cpu-shapes-only; cpu-screened")

    # The same kernel screened on its device shapes: merged, and the statuses say what proved it.
    screened = swarm.verify(sha, KERNEL, "pass", evidence="cpu-screened")
    swarm.wait_merged(number)
    statuses = status_descriptions(swarm, sha)
    assert statuses[per_kernel] == ("success", f"pass (cpu-screened): job {screened} by @alice")
    assert statuses["kswarm/verify:cpu"] == (
        "success",
        "pass (cpu-screened): all 1 changed kernel(s) verified",
    )
    code, out = cli(swarm, "pr", "why", str(number), "--repo", swarm.full)
    assert code == 0, out
    assert "evidence: cpu-screened (the policy requires cpu-screened)" in out


def test_a_device_requirement_waits_for_the_device_pools_pass(swarm: Swarm) -> None:
    checks = ["kswarm/verify:cpu", "kswarm/verify:npu-910c"]
    swarm.set_policy(required_approvals=1, required_checks=checks, min_evidence="device-verified")
    with swarm.gw.op() as op:
        policy = op.get(f"/api/forge/repos/{swarm.full}/policy/main").json()
        assert policy["min_evidence"] == "device-verified" and policy["required_checks"] == checks
        # A level that proves no kernel right cannot be required (it would require nothing).
        refused = op.put(f"/api/forge/repos/{swarm.full}/policy", json={"min_evidence": "none"})
        assert refused.status_code == 422, refused.text
    _, _, sha = swarm.push_branch("alice", "alice/device", KERNEL, "k\n")
    number = swarm.open_pr("alice", "alice/device")
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    since = time.time()
    swarm.verify(sha, KERNEL, "pass")  # an honest cpu pass: cpu-screened
    swarm.wait_decision(number, since, {"kernel-unverified"})
    code, out = cli(swarm, "pr", "why", str(number), "--repo", swarm.full)
    assert code == 0, out
    assert "WAITING" in out and "evidence: cpu-screened so far (the policy requires device-verified)" in out
    assert 'pool="npu-910c"' in out, "it says where to submit the missing job"
    assert not swarm.pr(number)["merged"]
    device = swarm.verify(sha, KERNEL, "pass", pool="npu-910c")  # device-verified
    swarm.wait_merged(number)
    statuses = status_descriptions(swarm, sha)
    assert statuses["kswarm/verify:npu-910c/add/alice_k.py"] == (
        "success",
        f"pass (device-verified): job {device} by @alice",
    )
