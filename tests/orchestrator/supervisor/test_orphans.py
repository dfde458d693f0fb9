"""orchestrator/supervisor/orphans.py: the orchestrator process reaps the orphans of its agents' process
trees and never a child that a ``Popen`` of its own waits for. Run in a subprocess: being a subreaper is a
property of the whole process, not for the test runner to take on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from kstest.orchestrator import REPO

SCRIPT = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from orchestrator.supervisor.orphans import become_subreaper, is_zombie, own_children, reap_until_settled

    assert become_subreaper()
    # An agent-like tree in a session of its own: its launcher exits at once, leaving a grandchild
    # (like bubblewrap's init when its monitor exits first) that exits a moment later.
    launcher = subprocess.Popen(
        ["sh", "-c", "sleep 0.3 & exit 0"], start_new_session=True
    )
    launcher.wait()
    # A child of our own, in its own session too, that a Popen waits for: never reaped behind its back.
    kept = subprocess.Popen(["sh", "-c", "exit 7"], start_new_session=True)
    deadline = time.monotonic() + 10
    while not is_zombie(kept.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    adopted = [p for p in own_children() if p != kept.pid]
    reaped = reap_until_settled(lambda: {kept.pid}, 10.0)
    left = [p for p in own_children() if p != kept.pid]
    print(json.dumps({"adopted": adopted, "reaped": reaped, "left": left, "kept": kept.wait()}))
    """
)


def test_orphans_are_reaped_and_a_waited_for_child_keeps_its_status() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen["adopted"]) == 1, seen  # the sleep, handed to us and not to the host's init
    assert seen["reaped"] == seen["adopted"] and seen["left"] == []
    assert seen["kept"] == 7
