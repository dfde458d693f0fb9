"""Executors describe themselves: every registered kind has a class and an options model under the same
name, with its capabilities declared; an executor outside the tree loads by its path (the one in
docs/jobs.md, "Adding an executor", as written there); a bad name or path says what is wrong; and no
code asks for a kind by its name."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from gateway.client.jobs.executors import EXECUTOR_OPTIONS, ExecutorOptions
from gateway.client.jobs.pools import JobLimits, PoolConfig
from orchestrator.worker.executors import EXECUTORS, ExecSpec, Executor, load_executor, make_executor

ROOT = Path(__file__).resolve().parents[3]
SKELETON_MODULE = "kswarm_kube"


def test_the_worker_and_the_gateway_register_the_same_kinds() -> None:
    assert set(EXECUTORS) == set(EXECUTOR_OPTIONS)


@pytest.mark.parametrize("kind", sorted(EXECUTORS))
def test_every_registered_executor_describes_itself(kind: str, tmp_path: Path) -> None:
    cls = load_executor(kind)
    model = EXECUTOR_OPTIONS[kind]
    assert cls.kind == kind
    assert cls.options_model is model, "the class declares the options model registered under its name"
    assert model().kind == kind, "its options default to its own kind"
    assert model.model_config.get("extra") == "forbid", "every option does something or is refused"
    assert isinstance(model.allocates_devices, bool) and model.submits_with
    executor = cls()
    assert isinstance(executor, Executor)
    assert executor.unavailable is None or isinstance(executor.unavailable, str)
    assert callable(executor.isolation)
    spec_fields = {f.name for f in fields(ExecSpec)}
    for device in ("cpu", "cuda", "npu"):
        extra = model().exec_fields(device)
        assert set(extra) <= spec_fields and extra["options"] == model()
        spec = ExecSpec(
            job_id="j1",
            attempt=1,
            argv=["true"],
            checkout=tmp_path,
            outdir=tmp_path,
            env={},
            timeout_s=1,
            limits=JobLimits(),
            **extra,
        )
        assert spec.options is not None and spec.options.kind == kind
    assert type(make_executor(model())) is cls and type(make_executor(kind)) is cls


def test_slurm_allocates_its_devices_and_the_others_leave_it_to_the_worker() -> None:
    assert {k for k, m in EXECUTOR_OPTIONS.items() if m.allocates_devices} == {"slurm"}


def skeleton() -> str:
    """The out-of-tree executor of docs/jobs.md, as written there."""
    text = (ROOT / "docs" / "jobs.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    found = [b for b in blocks if b.startswith(f"# {SKELETON_MODULE}.py")]
    assert len(found) == 1, "docs/jobs.md shows the skeleton module once"
    return found[0]


@pytest.fixture
def out_of_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / f"{SKELETON_MODULE}.py").write_text(skeleton())
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{SKELETON_MODULE}:KubeExecutor"
    sys.modules.pop(SKELETON_MODULE, None)


def test_an_executor_outside_the_tree_loads_by_its_path(out_of_tree: str, tmp_path: Path) -> None:
    cls = load_executor(out_of_tree)
    assert isinstance(cls(), Executor)
    pool = PoolConfig.model_validate({"name": "k8s", "executor": {"kind": out_of_tree, "namespace": "gpu"}})
    options = pool.executor
    assert isinstance(options, cls.options_model) and options.namespace == "gpu"
    again = PoolConfig.model_validate(pool.model_dump(mode="json"))  # what the worker reads back
    assert again == pool and type(again.executor) is cls.options_model
    with pytest.raises(ValueError, match="namespac"):
        PoolConfig.model_validate({"name": "k8s", "executor": {"kind": out_of_tree, "namespac": "gpu"}})
    assert type(make_executor(pool.executor)) is cls
    spec = ExecSpec(
        job_id="j1",
        attempt=1,
        argv=["true"],
        checkout=tmp_path,
        outdir=tmp_path,
        env={},
        timeout_s=1,
        limits=JobLimits(),
        **options.exec_fields("cpu"),
    )
    outcome = asyncio.run(cls().run(spec, asyncio.Event()))
    assert outcome.error == "not written yet (namespace gpu)"


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("k8s", "unknown executor 'k8s': local, docker, slurm, or package.module:Class"),
        ("no_such_module_x:Kube", "cannot import no_such_module_x"),
        ("json:NoSuchClass", "json has no NoSuchClass"),
        ("json:JSONDecoder", "is not an executor: a class with kind, options_model"),
        ("json:", "not a package.module:Class path"),
    ],
)
def test_a_bad_name_or_path_says_what_is_wrong(kind: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        load_executor(kind)


def test_the_gateway_refuses_a_path_into_the_tree_and_a_class_without_options() -> None:
    with pytest.raises(ValueError, match="an executor of the tree is named by its kind"):
        PoolConfig(name="p", executor="orchestrator.worker.executors.slurm:SlurmExecutor")
    with pytest.raises(ValueError, match="declares no options model"):
        PoolConfig(name="p", executor="json:JSONDecoder")
    assert issubclass(EXECUTOR_OPTIONS["local"], ExecutorOptions)


def test_no_code_asks_for_an_executor_by_its_name() -> None:
    """What a kind does is a capability of its options model or a method of its class: a check of the
    name (`== "slurm"`) outside the kind's own module would have to be found and edited per kind."""
    asks = re.compile(r"""[!=]=\s*["'](local|docker|slurm)["']|["'](local|docker|slurm)["']\s*[!=]=""")
    offenders = []
    for package in ("gateway", "orchestrator", "agents"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("orchestrator/worker/executors/"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if asks.search(line) and "backend" not in line:  # the agents' runtime backends
                    offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
