"""The CLI's shape, checked on the assembled app: one module per noun, ``main`` only assembles, every
command behind the one error handler, ``--home`` and ``--json`` where they belong, and no process of
the tree hand-building a gateway credential outside ``gateway.client``."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from orchestrator.cli.commands import HANDLED
from orchestrator.cli.main import app

ROOT = Path(__file__).resolve().parents[3]

# Top-level command or group -> the module that owns it.
NOUNS = {
    "init": "swarm",
    "validate": "swarm",
    "schema": "swarm",
    "up": "swarm",
    "down": "swarm",
    "ps": "swarm",
    "logs": "logs",
    "agent": "agent",
    "chat": "chat",
    "prs": "prs",
    "pr": "prs",
    "jobs": "jobs",
    "job": "jobs",
    "tasks": "tasks",
    "dataset": "dataset",
    "cost": "cost",
    "demo": "demo",
    "images": "images",
    "workers": "worker",
    "worker": "worker",
    "attention": "attention",
    "ui": "ui",
}
# A verb of a noun that lives in a module of its own (registered by the noun's module).
VERB_MODULES = {("agent", "timeline"): "timeline"}
# Write or read a file, print a schema, build images with Docker: they reach neither a gateway nor a home.
LOCAL_ONLY = {("init",), ("validate",), ("schema",), ("images", "build")}
LISTINGS = {
    ("ps",),
    ("workers",),
    ("worker", "token"),
    ("validate",),
    ("logs",),
    ("agent", "list"),
    ("agent", "add"),
    ("chat", "tail"),
    ("prs",),
    ("jobs",),
    ("tasks", "list"),
    ("attention",),
    ("agent", "timeline"),
}


def typer_commands(app: typer.Typer, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    """(command path, the callback as registered) for every command of ``app`` and its groups."""
    for info in app.registered_commands:
        yield (*path, info.name or info.callback.__name__), info.callback  # type: ignore[union-attr]
    for group in app.registered_groups:
        assert group.typer_instance is not None and group.name is not None
        yield from typer_commands(group.typer_instance, (*path, group.name))


def click_commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, click command) for every leaf command (typer ships its own click: duck-typed)."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from click_commands(sub, (*path, name))
    else:
        yield path, command


def test_each_command_lives_in_the_module_of_its_noun() -> None:
    seen = set()
    for path, callback in typer_commands(app):
        noun = path[0]
        assert noun in NOUNS, f"{' '.join(path)}: a new noun needs its own module (and a row in NOUNS)"
        module = VERB_MODULES.get(path, NOUNS[noun])
        assert callback.__module__ == f"orchestrator.cli.{module}", (path, callback.__module__)  # type: ignore[attr-defined]
        seen.add(noun)
    assert seen == set(NOUNS)


def test_main_only_assembles() -> None:
    module = importlib.import_module("orchestrator.cli.main")  # the package re-exports main()
    tree = ast.parse(Path(module.__file__ or "").read_text())
    decorated = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.decorator_list
    ]
    assert decorated == [], f"main.py declares commands {decorated}: they belong in their noun's module"
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert defined == {"main"}, defined


def test_every_command_is_behind_the_one_error_handler() -> None:
    unhandled = [" ".join(p) for p, cb in typer_commands(app) if not getattr(cb, HANDLED, False)]
    assert unhandled == [], f"declare them with orchestrator.cli.commands.command: {unhandled}"


def test_home_on_every_command_that_reaches_a_gateway_or_a_swarm() -> None:
    group = typer.main.get_command(app)
    missing = []
    for path, command in click_commands(group):
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        if path not in LOCAL_ONLY and "--home" not in options:
            missing.append(" ".join(path))
    assert missing == []


def test_json_on_every_listing() -> None:
    group = typer.main.get_command(app)
    commands = dict(click_commands(group))
    for path in LISTINGS:
        options = {opt for param in commands[path].params for opt in getattr(param, "opts", [])}
        assert "--json" in options, " ".join(path)


# The only commands without --json, and why: what they would answer is no object a script reads.
NO_JSON = {
    ("init",): "writes swarm.yaml, nothing else",
    ("schema",): "prints a JSON Schema: JSON already",
    ("demo",): "a run that ends with its own report (and exit code)",
    ("tasks", "lead"): "the gateway answers 204: there is no object",
}


def test_json_on_every_listing_and_every_action_that_returns_an_object() -> None:
    group = typer.main.get_command(app)
    missing = []
    for path, command in click_commands(group):
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        if path not in NO_JSON and "--json" not in options:
            missing.append(" ".join(path))
    assert missing == [], f"add --json (or a reason in NO_JSON): {missing}"


def sources(*patterns: str) -> Iterator[Path]:
    for pattern in patterns:
        yield from sorted(ROOT.glob(pattern))


def test_no_hand_built_gateway_credentials_outside_the_client() -> None:
    """``Authorization`` headers come from ``gateway.client.target.auth_headers`` only. (Git's token in
    ``orchestrator/worker/checkout.py`` and the LLM proxy's upstream key are not gateway calls; the demo's
    model, ``orchestrator/demo/upstream.py``, is a server: it reads the key its callers send.)"""
    servers = {ROOT / "orchestrator" / "demo" / "upstream.py"}
    offenders = []
    for path in sources(
        "orchestrator/cli/*.py",
        "orchestrator/demo/*.py",
        "orchestrator/worker/worker.py",
        "orchestrator/supervisor/main.py",
        "orchestrator/swarm_dir/provision.py",
        "orchestrator/supervisor/reconcile.py",
        "gateway/dataset/*.py",
        "agents/**/*.py",
        "bench/*.py",
    ):
        text = path.read_text()
        if path not in servers and ("Bearer " in text or '"Authorization"' in text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
