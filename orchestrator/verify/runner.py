"""The child-process trial runner: ``python -m orchestrator.verify.runner PLAN.json``.

It only *produces* data: for each trial it loads the inputs the parent wrote, copies them into guarded
buffers, calls the candidate's entry, and saves ``{"outputs": [...], "inputs": [...]}`` with torch.save
to the file the parent chose. It never sees the reference and decides nothing; the parent reloads the
files with ``weights_only=True`` and does every comparison itself.

Exit codes: 0 all trials ran; 3 the candidate failed to import; 4 the candidate raised; 2 bad plan.
Any other exit (signal, heap corruption at teardown) is judged by the parent as a crash.
"""

from __future__ import annotations

import importlib.util
import json
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

import torch

from orchestrator.verify.guards import guarded_copy
from orchestrator.verify.monitor import Monitor, launch_hooks
from orchestrator.verify.protocol import Plan, TrialSpec

MAX_FILE_BYTES = 8 << 30


class _Status:
    def __init__(self, path: Path) -> None:
        self._fh: TextIO = path.open("a", encoding="utf-8")

    def write(self, **event: Any) -> None:
        self._fh.write(json.dumps(event) + "\n")
        self._fh.flush()


def _describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text[-2000:]


def _limit_resources() -> None:
    # No core dumps from a segfaulting kernel; bounded file writes.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY or soft > MAX_FILE_BYTES:
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, hard))


def _import_entry(path: Path, entry: str) -> Any:
    name = "kswarm_candidate"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton looks kernels' modules up by name
    spec.loader.exec_module(module)
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise AttributeError(f"candidate has no callable {entry!r}")
    return fn


def _synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.get_device_module(device.type).synchronize()


def _normalise(result: object) -> list[torch.Tensor | None]:
    """Plain tensors pass through; anything else (subclasses included) becomes None = not a tensor."""
    if isinstance(result, tuple | list):
        return [x if type(x) is torch.Tensor else None for x in result]
    return [result if type(result) is torch.Tensor else None]


def _load_inputs(spec: TrialSpec, device: torch.device) -> list[Any]:
    inputs = torch.load(spec.inputs, weights_only=True)
    return [guarded_copy(x, device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _run_trial(entry: Any, spec: TrialSpec, device: torch.device, monitor: Monitor, status: _Status) -> int:
    args = _load_inputs(spec, device)
    monitor.reset()
    start = time.perf_counter()
    try:
        with monitor.watch():
            result = entry(*args)
        _synchronize(device)
    except BaseException as exc:  # SystemExit too: a candidate that exits has crashed
        status.write(event="trial", index=spec.index, launches=monitor.launches, error=_describe(exc))
        return 4
    elapsed = time.perf_counter() - start
    torch.save({"outputs": _normalise(result), "inputs": args}, spec.outputs)
    status.write(
        event="trial",
        index=spec.index,
        launches=monitor.launches,
        torch_ops=sorted(set(monitor.ops)),
        oob=monitor.oob(),
        elapsed_s=elapsed,
    )
    return 0


def _run_timing(entry: Any, plan: Plan, device: torch.device, status: _Status) -> None:
    from orchestrator.verify.timing import BenchConfig, TorchDeviceClock, bench

    assert plan.timing is not None
    config = BenchConfig(**plan.timing.get("config", {}))
    clock = TorchDeviceClock(device, config.flush_bytes)
    by_index = {t.index: t for t in plan.trials}
    for index in plan.timing.get("indices", []):
        raw = torch.load(by_index[index].inputs, weights_only=True)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in raw]
        samples = bench(lambda inputs=inputs: entry(*inputs), clock, config)
        status.write(event="timing", index=index, samples_ms=samples)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m orchestrator.verify.runner PLAN.json", file=sys.stderr)
        return 2
    plan = Plan.load(Path(args[0]))
    status = _Status(Path(plan.status))
    _limit_resources()
    device = torch.device(plan.device)
    if device.type == "npu":
        importlib.import_module("torch_npu")
    monitor = Monitor()
    with launch_hooks(monitor):
        try:
            with monitor.watch():
                entry = _import_entry(Path(plan.candidate), plan.entry)
        except BaseException as exc:
            status.write(event="import", torch_ops=sorted(set(monitor.ops)), error=_describe(exc))
            return 3
        status.write(event="import", torch_ops=sorted(set(monitor.ops)))
        for spec in plan.trials:
            rc = _run_trial(entry, spec, device, monitor, status)
            if rc:
                return rc
        if plan.timing:
            _run_timing(entry, plan, device, status)
    status.write(event="done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
