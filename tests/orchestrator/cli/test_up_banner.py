"""`kswarm up`'s banner says which of the sandbox's protections are in effect on this host (issue 18)."""

from __future__ import annotations

import yaml

from gateway.client import GatewayInfo
from orchestrator.cli.lifecycle import print_banner
from orchestrator.cli.output import console
from orchestrator.sandbox.report import protection_lines
from orchestrator.spec import SwarmSpec


def test_the_banner_names_the_protections_in_effect() -> None:
    spec = SwarmSpec.model_validate(yaml.safe_load("swarm: s\nagents: [{name: dev, role: developer}]\n"))
    info = GatewayInfo(url="http://127.0.0.1:1", socket="/tmp/h/run/gateway.sock", pid=1)
    with console.capture() as captured:
        print_banner(info, "ksw_x", [], spec, None)
    text = " ".join(captured.get().replace("│", " ").split())  # the panel wraps its lines
    for line in protection_lines(65534):  # what the sandbox module reports here, word for word
        assert " ".join(line.split()) in text
    assert "sandbox:" in text and "seccomp:" in text
