"""The demo swarm: a lead, developers and reviewers on the ``scripted`` model, the ``cpu`` pool, the
dataset repo ``kswarm/dataset`` (1 approval + a green ``kswarm/verify:cpu`` to merge) and the ``kb``.

``demo_spec()`` builds it; ``write_spec()`` saves it as the ``swarm.yaml`` the CLI's other commands
(``kswarm ps``, ``logs``, ``down``) find; ``--spec FILE`` runs a user's spec instead, whose agents'
roles (``lead``, ``developer``, ``reviewer``) say who does what.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from gateway.tasks import catalogue
from orchestrator.spec import SwarmSpec, load_spec

ORG = "kswarm"
DATASET_REPO = f"{ORG}/dataset"
KB_REPO = f"{ORG}/kb"
POOL = "cpu"
CHECK = f"kswarm/verify:{POOL}"
PROMPTS = Path(__file__).resolve().parent / "prompts"
# Eight tasks with honest solutions, softmax among them (its first attempt is the known-wrong kernel).
DEFAULT_TASKS = ("add", "relu", "silu", "gelu", "softmax", "sum_rows", "max_rows", "rmsnorm")
DEFAULT_MODEL_ID = "claude-sonnet-4-5"


class DemoSpecError(ValueError):
    """The demo cannot run with these options or this spec; the message says why."""


@dataclass(frozen=True)
class Roster:
    """Who plays which part."""

    lead: str
    developers: tuple[str, ...]
    reviewers: tuple[str, ...]
    red_team: tuple[str, ...] = ()

    @property
    def everyone(self) -> tuple[str, ...]:
        return (self.lead, *self.developers, *self.reviewers, *self.red_team)


def default_roster(agents: int) -> Roster:
    """One lead; from 5 agents on, one red team agent; a third of the rest reviewing (at least one),
    the others developing."""
    if agents < 4:
        raise DemoSpecError("the demo needs at least 4 agents: a lead, two developers and a reviewer")
    red = 1 if agents >= 5 else 0
    reviewers = max(1, (agents - 1 - red) // 3)
    developers = agents - 1 - red - reviewers
    return Roster(
        "lead",
        tuple(f"dev-{i}" for i in range(1, developers + 1)),
        tuple(f"rev-{i}" for i in range(1, reviewers + 1)),
        tuple(f"red-{i}" for i in range(1, red + 1)),
    )


def roster_of(spec: SwarmSpec) -> Roster:
    agents = spec.expand()
    leads = [a.name for a in agents if a.role == "lead"]
    developers = tuple(a.name for a in agents if a.role == "developer")
    reviewers = tuple(a.name for a in agents if a.role == "reviewer")
    red_team = tuple(a.name for a in agents if a.role == "red-team")
    if len(leads) != 1 or not developers or not reviewers:
        raise DemoSpecError(
            "a demo spec needs exactly one agent with role lead, and at least one developer and one "
            f"reviewer (found leads {leads}, developers {list(developers)}, reviewers {list(reviewers)})"
        )
    return Roster(leads[0], developers, reviewers, red_team)


def check_tasks(tasks: list[str]) -> list[str]:
    """Only catalogue tasks with a reference solution can be done by the scripted developers."""
    known = set(catalogue.solution_names())
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise DemoSpecError(
            f"no reference solution for {', '.join(unknown)}; the demo can run: {', '.join(sorted(known))}"
        )
    if len(set(tasks)) != len(tasks) or not tasks:
        raise DemoSpecError("name each task once, and at least one")
    return tasks


AGENT_COMMAND = ["python", "-m", "orchestrator.demo.agent"]


def demo_env(roster: Roster, scripted: bool) -> dict[str, str]:
    """What the demo agents agree on (``orchestrator.demo.policy.DemoPolicy.from_env``)."""
    return {
        "KSWARM_DEMO_REPO": DATASET_REPO,
        "KSWARM_DEMO_POOL": POOL,
        "KSWARM_DEMO_REVIEWERS": ",".join(roster.reviewers),
        "KSWARM_DEMO_RED_TEAM": ",".join(roster.red_team),
        # A scripted developer does a whole task in one wake (claim ... job_submit): 30 turns is tight.
        "KSWARM_AGENT_MAX_TURNS": "80" if scripted else "40",
    }


def model_served(spec: SwarmSpec) -> bool:
    """Whether the demo serves its scripted model behind the gateway's LLM proxy
    (``orchestrator.demo.upstream``): when every agent is scripted. A swarm that mixes in a real model
    has one upstream for the proxy, the real one; its scripted agents then run the rules in-process."""
    return all(agent.model == "scripted" for agent in spec.expand())


def with_demo_runtime(spec: SwarmSpec) -> SwarmSpec:
    """Every agent runs the demo's entry point (git bridge, demo rules) with the demo's variables; where
    the demo serves the scripted model, agents reach it as a model through the proxy (the Anthropic
    client, ``model_kind: anthropic``), so that every call is booked like a real one."""
    roster = roster_of(spec)
    scripted = spec.defaults.model == "scripted"
    served = {"KSWARM_AGENT_MODEL_KIND": "anthropic"} if model_served(spec) else {}
    options = [spec.defaults.runtime, *(a.runtime for a in spec.agents if a.runtime is not None)]
    for runtime in options:
        runtime.command = runtime.command or list(AGENT_COMMAND)
        runtime.env = {**demo_env(roster, scripted), **served, **runtime.env}
    return spec


def demo_spec(
    agents: int = 5,
    model: str = "scripted",
    backend: str = "process",
    model_id: str = DEFAULT_MODEL_ID,
) -> SwarmSpec:
    roster = default_roster(agents)

    def entry(name: str, role: str) -> dict[str, object]:
        return {"name": name, "role": role, "prompt": str(PROMPTS / f"{role}.md")}

    data = {
        "swarm": "demo",
        "backend": backend,
        "defaults": {
            "model": "scripted" if model == "scripted" else model_id,
            "runtime": {"command": list(AGENT_COMMAND), "heartbeat_s": 2.0},
            "resources": {"memory": "2g", "pids": 512},
        },
        "agents": [
            entry(roster.lead, "lead"),
            *(entry(d, "developer") for d in roster.developers),
            *(entry(r, "reviewer") for r in roster.reviewers),
            *(entry(r, "red-team") for r in roster.red_team),
        ],
        "repos": [
            {"name": "dataset", "kind": "dataset", "description": "Curated, verified kernels."},
            {"name": "kb", "kind": "code", "description": "Knowledge base: notes changed by reviewed PRs."},
        ],
        "pools": [
            {
                "name": POOL,
                "kind": "docker" if backend == "docker" else "local",
                "device": "cpu",
                "workers": 1,
            }
        ],
        # cpu-only (no device pool): a kernel merges on the cpu pool's screened pass (min_evidence).
        "review": {
            "approvals": 1,
            "required_checks": [CHECK],
            "min_evidence": "cpu-screened",
            "dismiss_on_push": True,
        },
        "lifecycle": {"reconcile_s": 1.0, "stall_after_s": 120.0},
        # No uid_base: agents' uids come from this home's block (orchestrator/swarm_dir/uid_ranges.py).
    }
    return with_demo_runtime(SwarmSpec.model_validate(data))


def load_demo_spec(path: Path) -> SwarmSpec:
    return with_demo_runtime(load_spec(path))


def write_spec(spec: SwarmSpec, path: Path) -> Path:
    """Save the spec as YAML (what ``kswarm ps``/``logs``/``down`` and a re-run with --spec read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = spec.model_dump(mode="json", exclude={"source"}, exclude_none=True)
    for target, dumped in zip(spec.alerts, data.get("alerts") or [], strict=True):
        dumped["url"] = target.url.get_secret_value()  # the operator's own spec again, not **********
    header = f"# The demo swarm, written by `kswarm demo`; run it again with: kswarm demo --spec {path}\n"
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    spec.source = path.resolve()
    return path
