"""kswarm's own sandbox, built by root without CAP_NET_ADMIN (what compose's worker container is): it
cannot bring ``lo`` up in the job's network namespace, and must still build the sandbox -- with no
interface at all, more confined than asked, never less. Before the fix the whole sandbox failed
(exit 121, ``[Errno 1] Operation not permitted``), so every job of the compose worker was refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from orchestrator.sandbox.probe import probe_plan

# What the command reports: the errno of a TCP connect to a closed loopback port. ECONNREFUSED: lo is
# up (nothing listens); ENETUNREACH: no interface is up at all.
PROBE = """
import errno, socket
try:
    socket.create_connection(("127.0.0.1", 9), timeout=5)
except OSError as exc:
    print(errno.errorcode.get(exc.errno, exc.errno))
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root builds kswarm's own sandbox without a userns")


@pytest.mark.parametrize(("drop_net_admin", "seen"), [(False, "ECONNREFUSED"), (True, "ENETUNREACH")])
def test_root_without_net_admin_gets_a_sandbox_with_no_interface(drop_net_admin: bool, seen: str) -> None:
    capsh = shutil.which("capsh")
    if drop_net_admin and capsh is None:
        pytest.skip("capsh (libcap2-bin) is not installed")
    plan = probe_plan(65534).model_copy(update={"argv": [sys.executable, "-c", PROBE], "loopback": True})
    command = [sys.executable, "-m", "orchestrator.sandbox", plan.model_dump_json()]
    if drop_net_admin:
        assert capsh is not None
        command = [capsh, "--drop=cap_net_admin", "--", "-c", 'exec "$@"', "sandbox", *command]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KSWARM_SANDBOX": "namespaces"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == seen
