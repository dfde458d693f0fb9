"""The review gate end to end: real git pushes, reviews and statuses over HTTP, the gate bot merging."""

from __future__ import annotations

import threading
import time

from forgekit import Swarm

from kstest.waiting import wait_for


def test_self_approval_rejected(swarm: Swarm) -> None:
    swarm.push_branch("alice", "alice/self", "k.py", "k\n")
    number = swarm.open_pr("alice", "alice/self")
    reply = swarm.review("alice", number, "APPROVED")
    assert reply.status_code == 422
    assert "approve your own pull is not allowed" in reply.json()["message"]
    assert swarm.review("alice", number, "REQUEST_CHANGES", "hm").status_code == 422
    assert swarm.review("alice", number, "COMMENT", "a note to self").status_code == 200


def test_agent_cannot_set_a_status(swarm: Swarm) -> None:
    _, _, sha = swarm.push_branch("alice", "alice/st", "k.py", "k\n")
    reply = swarm.status("alice", sha, "success", "ci/lint")
    assert reply.status_code == 403
    assert "only job workers set commit statuses" in reply.json()["message"]
    assert swarm.status("bob", sha, "success", "ci/lint").status_code == 403
    assert swarm.status("worker1", sha, "success", "ci/lint").status_code == 201
    with swarm.api("alice") as api:
        combined = api.get(f"/repos/{swarm.full}/commits/{sha}/status").json()
    assert [(s["context"], s["status"], s["creator"]["login"]) for s in combined["statuses"]] == [
        ("ci/lint", "success", "worker1")
    ]


def test_nobody_but_the_gateway_sets_kswarm_statuses(swarm: Swarm) -> None:
    """The attack: a worker token (or a forged status) claims kswarm/verify:cpu = success; the
    aggregate and the per-kernel statuses are computed by the gateway from job results only."""
    _, _, sha = swarm.push_branch("alice", "alice/forged", "kernels/add/alice_k.py", "k\n")
    for context in ("kswarm/verify:cpu", "kswarm/verify:cpu/add/alice_k.py", "kswarm/anything"):
        reply = swarm.status("worker1", sha, "success", context)
        assert reply.status_code == 403, (context, reply.text)
        assert "computed by the gateway" in reply.json()["message"]
    assert swarm.statuses(sha) == {}


def test_only_the_gate_merges(swarm: Swarm) -> None:
    _, _, sha = swarm.push_branch("alice", "alice/m", "k.py", "k\n")
    number = swarm.open_pr("alice", "alice/m")
    for who in ("alice", "bob", "operator"):
        with swarm.api(who) as api:
            reply = api.post(
                f"/repos/{swarm.full}/pulls/{number}/merge", json={"Do": "merge", "head_commit_id": sha}
            )
        assert reply.status_code == 405, (who, reply.text)
        assert "only the review gate merges" in reply.json()["message"]


def test_blocked_until_the_changed_kernel_is_verified_then_merged(swarm: Swarm) -> None:
    kernel = "kernels/add/alice_k.py"
    _, _, sha = swarm.push_branch("alice", "alice/kernel", kernel, "def add(): ...\n")
    number = swarm.open_pr("alice", "alice/kernel")
    since = time.time()
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    decision = swarm.wait_decision(number, since, {"kernel-unverified"})
    assert decision["action"] == "blocked"
    assert decision["approvals"] == ["bob"]
    assert not swarm.pr(number)["merged"]
    # a job that proves nothing (an error, a timeout) keeps it waiting; a pending one too
    since = time.time()
    swarm.verify(sha, kernel, "error", submitter="carol")
    swarm.wait_decision(number, since, {"kernel-unverified"})
    since = time.time()
    swarm.verify(sha, kernel, None, state="queued")
    swarm.wait_decision(number, since, {"kernel-pending"})
    assert wait_for(lambda: swarm.statuses(sha).get("kswarm/verify:cpu")) == ("pending", "gate")
    # a pass merges; the gate publishes the per-kernel and the aggregate status itself
    job = swarm.verify(sha, kernel, "pass")
    merged = swarm.wait_merged(number)
    assert merged["merged_by"]["login"] == "gate"
    statuses = swarm.statuses(sha)
    assert statuses["kswarm/verify:cpu/add/alice_k.py"] == ("success", "gate")
    assert statuses["kswarm/verify:cpu"] == ("success", "gate")
    view = swarm.view(number)
    assert job in {j["id"] for k in view["gate"]["kernels"] for c in k["checks"] for j in c["jobs"]}
    # a fresh clone shows the merge, authored by the gate, with alice's commit as second parent
    git, fresh = swarm.clone("carol", "fresh")
    assert (fresh / "kernels" / "add" / "alice_k.py").read_text() == "def add(): ...\n"
    parents = git.run("log", "-1", "--format=%P", cwd=fresh).stdout.split()
    assert parents[1] == sha and len(parents) == 2
    author = git.run("log", "-1", "--format=%an <%ae>", cwd=fresh).stdout.strip()
    assert author == "gate <gate@bots.test>"
    assert git.head(fresh) == merged["merge_commit_sha"]
    # announced in #reviews with an @mention of the author
    texts = wait_for(lambda: [t for t in swarm.reviews_channel() if "merged into main" in t])
    assert f"@alice {swarm.full}#{number}" in texts[0] and "approved by @bob" in texts[0]
    with swarm.gw.client(swarm.tokens["alice"]) as alice:
        items = alice.get("/api/inbox", params={"peek": True}).json()["items"]
    assert any(i["sender"] == "gate" and "merged into main" in i["text"] for i in items)
    with swarm.gw.op() as op:
        metrics = op.get("/metrics").text
    assert 'kswarm_gate_decisions_total{action="merged"}' in metrics
    assert 'kswarm_gate_decisions_total{action="blocked"}' in metrics


def test_a_real_failure_blocks_and_is_announced(swarm: Swarm) -> None:
    kernel = "kernels/softmax/alice_k.py"
    _, _, sha = swarm.push_branch("alice", "alice/bad", kernel, "wrong\n")
    number = swarm.open_pr("alice", "alice/bad")
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    swarm.verify(sha, kernel, "pass")
    since = time.time()
    swarm.verify(sha, kernel, "fail", submitter="carol")  # anyone's real failure of the kernel counts
    decision = swarm.wait_decision(number, since, {"kernel-failed"})
    assert [r["blocking"] for r in decision["reasons"]] == [True]
    wait_for(lambda: any("is blocked" in t and "@alice" in t for t in swarm.reviews_channel()))
    assert wait_for(lambda: swarm.statuses(sha).get("kswarm/verify:cpu")) == ("failure", "gate")
    assert not swarm.pr(number)["merged"]


def test_stale_approval_dismissed_after_push(swarm: Swarm) -> None:
    kernel = "kernels/add/alice_v.py"
    git, repo, first = swarm.push_branch("alice", "alice/stale", kernel, "v1\n")
    number = swarm.open_pr("alice", "alice/stale")
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    second = git.commit(repo, kernel, "v2 (unreviewed)\n", "sneak a change in after approval")
    assert git.push(repo, "alice/stale").returncode == 0
    with swarm.api("alice") as api:
        reviews = api.get(f"/repos/{swarm.full}/pulls/{number}/reviews").json()
    assert [(r["user"]["login"], r["commit_id"], r["dismissed"], r["stale"]) for r in reviews] == [
        ("bob", first, True, True)
    ]
    since = time.time()
    swarm.verify(second, kernel, "pass")
    decision = swarm.wait_decision(number, since, {"approvals"})
    assert decision["action"] == "blocked"
    assert decision["head_sha"] == second and decision["approvals"] == []
    assert not swarm.pr(number)["merged"]
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    merged = swarm.wait_merged(number)
    assert merged["head"]["sha"] == second


def test_outstanding_change_request_blocks(swarm: Swarm) -> None:
    kernel = "kernels/add/alice_rc.py"
    git, repo, sha = swarm.push_branch("alice", "alice/rc", kernel, "v1\n")
    number = swarm.open_pr("alice", "alice/rc")
    assert swarm.review("bob", number, "REQUEST_CHANGES", "bounds check missing").status_code == 200
    assert swarm.review("carol", number, "APPROVED").status_code == 200
    since = time.time()
    swarm.verify(sha, kernel, "pass")
    decision = swarm.wait_decision(number, since, {"changes-requested"})
    assert decision["approvals"] == ["carol"]
    wait_for(lambda: any("@bob requested changes" in t and "@alice" in t for t in swarm.reviews_channel()))
    # a new push does not clear bob's request; carol's approval is dismissed
    fixed = git.commit(repo, kernel, "v2 with bounds check\n", "bounds check")
    assert git.push(repo, "alice/rc").returncode == 0
    swarm.verify(fixed, kernel, "pass")
    assert swarm.review("carol", number, "APPROVED").status_code == 200
    since = time.time()
    assert swarm.review("carol", number, "COMMENT", "still waiting on bob").status_code == 200
    decision = swarm.wait_decision(number, since, {"changes-requested"})
    assert decision["approvals"] == ["carol"]
    assert not swarm.pr(number)["merged"]
    # bob approves the new head: merged
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    swarm.wait_merged(number)


def test_two_prs_mergeable_at_once_merge_one_after_the_other(swarm: Swarm) -> None:
    _, _, sha_a = swarm.push_branch("alice", "alice/a", "kernels/add/alice_a.py", "a\n")
    _, _, sha_b = swarm.push_branch("bob", "bob/b", "kernels/add/bob_b.py", "b\n")
    pr_a = swarm.open_pr("alice", "alice/a")
    pr_b = swarm.open_pr("bob", "bob/b")
    assert swarm.review("carol", pr_a, "APPROVED").status_code == 200
    assert swarm.review("carol", pr_b, "APPROVED").status_code == 200
    # both checks land at the same moment
    go = threading.Barrier(2)

    def set_green(sha: str, kernel: str) -> None:
        go.wait()
        swarm.verify(sha, kernel, "pass")

    pairs = ((sha_a, "kernels/add/alice_a.py"), (sha_b, "kernels/add/bob_b.py"))
    threads = [threading.Thread(target=set_green, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    merged_a, merged_b = swarm.wait_merged(pr_a), swarm.wait_merged(pr_b)
    git, fresh = swarm.clone("carol", "fresh2")
    added = fresh / "kernels" / "add"
    assert (added / "alice_a.py").read_text() == "a\n" and (added / "bob_b.py").read_text() == "b\n"
    first_parent = git.run("log", "--first-parent", "--format=%H %P", cwd=fresh).stdout.splitlines()
    assert len(first_parent) == 3  # merge, merge, initial commit: linear on main
    merges = {merged_a["merge_commit_sha"], merged_b["merge_commit_sha"]}
    assert {line.split()[0] for line in first_parent[:2]} == merges
    for line in first_parent[:2]:
        assert len(line.split()) == 3  # each merge has two parents
    git.run("merge-base", "--is-ancestor", sha_a, "HEAD", cwd=fresh)
    git.run("merge-base", "--is-ancestor", sha_b, "HEAD", cwd=fresh)
    assert git.run("fsck", "--no-progress", cwd=fresh).returncode == 0


def test_conflicting_pr_is_blocked_after_the_other_merges(swarm: Swarm) -> None:
    swarm.push_branch("alice", "alice/c1", "same.py", "alice's\n")
    swarm.push_branch("bob", "bob/c2", "same.py", "bob's\n")  # no kernels: no jobs needed
    pr_a, pr_b = swarm.open_pr("alice", "alice/c1"), swarm.open_pr("bob", "bob/c2")
    for number in (pr_a, pr_b):
        assert swarm.review("carol", number, "APPROVED").status_code == 200
    swarm.wait_merged(pr_a)
    since = time.time()
    assert swarm.review("carol", pr_b, "COMMENT", "look again").status_code == 200
    swarm.wait_decision(pr_b, since, {"conflict"})
    assert not swarm.pr(pr_b)["merged"]


def test_reproduction_rule(swarm: Swarm) -> None:
    swarm.set_policy(required_approvals=1, required_checks=["kswarm/verify:cpu"], require_reproduction=True)
    kernels = ("kernels/add/alice_r.py", "kernels/relu/alice_r.py")
    git, repo, _ = swarm.push_branch("alice", "alice/repro", kernels[0], "k\n")
    sha = git.commit(repo, kernels[1], "r\n", "second kernel")
    assert git.push(repo, "alice/repro").returncode == 0
    number = swarm.open_pr("alice", "alice/repro")
    assert swarm.review("bob", number, "APPROVED").status_code == 200
    for kernel in kernels:
        swarm.verify(sha, kernel, "pass", submitter="alice")
    since = time.time()
    swarm.verify(sha, kernels[0], "pass", submitter="bob")  # bob reproduced only one of the two
    decision = swarm.wait_decision(number, since, {"reproduction", "approvals"})
    assert kernels[1] in decision["reasons"][0]["message"]
    since = time.time()
    swarm.verify(sha, kernels[1], "pass", submitter="carol")  # someone else's job is not bob's
    swarm.wait_decision(number, since, {"reproduction", "approvals"})
    swarm.verify(sha, kernels[1], "pass", submitter="bob")
    swarm.wait_merged(number)


def test_review_request_lands_in_the_reviewers_inbox(swarm: Swarm) -> None:
    swarm.push_branch("alice", "alice/ask", "k.py", "k\n")
    number = swarm.open_pr("alice", "alice/ask", reviewers=("bob",))
    with swarm.gw.client(swarm.tokens["bob"]) as bob:
        items = bob.get("/api/inbox", params={"peek": True}).json()["items"]
    notices = [i for i in items if f"{swarm.full}#{number}" in i["text"]]
    assert len(notices) == 1
    assert notices[0]["reason"] == "notice" and notices[0]["sender"] == "alice"
    assert swarm.pr(number)["requested_reviewers"][0]["login"] == "bob"
    # the author cannot ask themselves
    swarm.push_branch("alice", "alice/ask2", "k2.py", "k\n")
    with swarm.api("alice") as api:
        body = {"head": "alice/ask2", "base": "main", "title": "t", "reviewers": ["alice"]}
        assert api.post(f"/repos/{swarm.full}/pulls", json=body).status_code == 422


def test_a_kernel_changed_on_main_since_the_fork_is_not_merged_unverified(swarm: Swarm) -> None:
    """Two PRs of alice change the same kernel from the same fork point, each verified. After the
    first merges, merging the second would put a three-way merge of both on main that no job
    verified: the gate blocks it until the branch is brought up to date and verified again."""
    kernel = "kernels/add/alice_k.py"
    base_text = "".join(f"line {i}\n" for i in range(20))
    _, _, start = swarm.push_branch("alice", "alice/base", kernel, base_text)
    first = swarm.open_pr("alice", "alice/base")
    assert swarm.review("bob", first, "APPROVED").status_code == 200
    swarm.verify(start, kernel, "pass")
    swarm.wait_merged(first)
    git_a, repo_a = swarm.clone("alice", "w-a")
    git_a.run("checkout", "-q", "-b", "alice/top", cwd=repo_a)
    sha_a = git_a.commit(repo_a, kernel, base_text.replace("line 1\n", "top\n"), "top")
    assert git_a.push(repo_a, "alice/top").returncode == 0
    git_b, repo_b = swarm.clone("alice", "w-b")
    git_b.run("checkout", "-q", "-b", "alice/bottom", cwd=repo_b)
    sha_b = git_b.commit(repo_b, kernel, base_text.replace("line 18\n", "bottom\n"), "bottom")
    assert git_b.push(repo_b, "alice/bottom").returncode == 0
    pr_a, pr_b = swarm.open_pr("alice", "alice/top"), swarm.open_pr("alice", "alice/bottom")
    for number, sha in ((pr_a, sha_a), (pr_b, sha_b)):
        assert swarm.review("bob", number, "APPROVED").status_code == 200
        swarm.verify(sha, kernel, "pass")
    swarm.wait_merged(pr_a)
    since = time.time()
    assert swarm.review("carol", pr_b, "COMMENT", "look again").status_code == 200
    decision = swarm.wait_decision(pr_b, since, {"kernel-stale"})
    assert "also changed on main" in decision["reasons"][0]["message"]
    assert not swarm.pr(pr_b)["merged"]
