"""The child's trial runner. Loaded by the bootstrap (spawn.py) from source, never importable by name.

It only *produces* data: for each trial (its plan arrives with its inputs, once the trial before it
was reported) it rebuilds the inputs the parent sent (exact layouts, in guarded storages), runs the
planned calls (first, the same inputs again, the same buffers refilled
with new values; or one blind call with every instrument removed), and sends back everything the
candidate returned plus snapshots of the inputs. It never sees the reference and decides nothing.

Exit codes: 0 all trials ran; 3 the candidate failed to import; 4 the candidate raised; 2 bad plan.
Any other exit (signal, heap corruption at teardown) is judged by the parent as a crash.
"""

from __future__ import annotations

import importlib.util
import io
import json
import linecache
import os
import re
import resource
import secrets
import sys
import time
import traceback
import types
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import triton

from orchestrator.verify import protocol as proto
from orchestrator.verify.attribution import Attribution
from orchestrator.verify.guards import GuardParams, guarded_storage, place, raw_bytes
from orchestrator.verify.hostguards import AuditHook, HostGuards
from orchestrator.verify.integrity import Integrity
from orchestrator.verify.interp import InterpreterInstruments
from orchestrator.verify.interp_autotune import InterpreterBench, install_autotune_bench
from orchestrator.verify.monitor import LaunchHooks, Monitor, dispatch_mode
from orchestrator.verify.sampling import SampleRequest, Sampling
from orchestrator.verify.timing import BenchConfig, TorchDeviceClock, bench

MAX_FILE_BYTES = 8 << 30
MAX_BLOB_BYTES = 16 << 30
_SAVE, _LOAD = torch.save, torch.load  # private references: a patched torch.save changes nothing here
# Read tensors past any __torch_function__ a candidate may have given them (class swaps).
_NO_SUBCLASS = torch._C.DisableTorchFunctionSubclass


# A harness-owned kernel launched once before the baseline is taken: Triton's first launch imports
# and (on a device) compiles lazily, and the device runtime starts; none of that is the candidate's.
_WARM_UP = """
import triton
import triton.language as tl


@triton.jit
def warm(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
"""


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))[-2000:]


def _limit_resources() -> None:
    # No core dumps from a segfaulting kernel; bounded file writes.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY or soft > MAX_FILE_BYTES:
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, hard))


def _module_name(path: Path) -> str:
    # The file's own stem, as `import <stem>` would name it: nothing that says "under test".
    stem = re.sub(r"\W", "_", path.stem) or "kernel"
    while stem in sys.modules:
        stem += "_"
    return stem


# Frames of padding drawn per call (every kind): the stack depth and recursion headroom a candidate
# can measure at its entry vary at random, so they say nothing about which kind of call this is.
MAX_PAD_FRAMES = 48


def _call_entry(entry: Any, args: list[Any], pad: int) -> Any:
    """The one path from the runner to the candidate, for monitored and blind calls alike."""
    if pad > 0:
        return _call_entry(entry, args, pad - 1)
    return entry(*args)


def _plain(result: object) -> list[torch.Tensor | None]:
    """Plain tensors pass through; anything else (subclasses included) becomes None = not a tensor.

    A tuple or any tuple subclass (a ``namedtuple``, ``torch.return_types.max``) is unpacked through
    tuple's own C slots, so no method of the candidate's class runs here, after its window closed; a
    list only when it is exactly a list (a subclass's ``__iter__`` would run).
    """
    if isinstance(result, tuple):
        items = [tuple.__getitem__(result, i) for i in range(tuple.__len__(result))]
    elif type(result) is list:
        items = list.copy(result)
    else:
        items = [result]
    return [x if type(x) is torch.Tensor else None for x in items]


def _alias(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor on t's storage (whatever t's class became): what the blob carries for an input."""
    out = torch.empty((0,), dtype=t.dtype, device=t.device)
    return out.set_(raw_bytes(t).untyped_storage(), t.storage_offset(), t.size(), t.stride())


def _span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return int(storage.data_ptr()), int(storage.data_ptr()) + int(storage.nbytes())


class _Input:
    """One tensor input: its guarded (or plain) buffer and where its storage sits in it."""

    def __init__(self, spec: Mapping[str, Any], device: torch.device, params: GuardParams | None) -> None:
        storage: torch.Tensor = spec["storage"]
        self.nbytes = storage.numel()
        self.raw, self.front = guarded_storage(self.nbytes, device, params)
        self.raw[self.front : self.front + self.nbytes].copy_(storage)
        dtype = getattr(torch, spec["dtype"])
        self.tensor = place(self.raw, self.front, dtype, spec["size"], spec["stride"], int(spec["offset"]))

    def refill(self, spec: Mapping[str, Any]) -> None:
        self.raw[self.front : self.front + self.nbytes].copy_(spec["storage"])

    def snapshot(self) -> torch.Tensor:
        t = self.tensor
        copy = raw_bytes(t).clone()
        out = torch.empty((0,), dtype=t.dtype, device=t.device)
        return out.set_(copy.untyped_storage(), t.storage_offset(), t.size(), t.stride())


class Runner:
    def __init__(
        self, plan: proto.Plan, fd_in: int, fd_out: int, harness: Mapping[str, dict[str, Any]]
    ) -> None:
        self.plan, self.fd_in, self.fd_out = plan, fd_in, fd_out
        self.device = torch.device(plan.device)
        self.params = GuardParams.from_json(plan.guards)
        files = {str(ns.get("__file__")) for ns in harness.values()}
        self.attribution = Attribution(plan.candidate, files, os.path.dirname(triton.__file__))
        self.attribution.add_root(_call_entry.__code__)
        self.monitor = Monitor(self.attribution, self.params)
        self.mode = dispatch_mode(self.monitor)
        self.launch_hooks = LaunchHooks(self.monitor)
        self.interp = InterpreterInstruments(self.monitor, 0) if plan.interpret else None
        self.autotune = InterpreterBench() if plan.interpret else None
        probe = f"{secrets.token_hex(6)}.{secrets.token_hex(4)}"
        self.audit = AuditHook(self.monitor, probe)
        sys.addaudithook(self.audit)
        self.host_guards = HostGuards(self.monitor)
        self.integrity = Integrity(harness, self._watched_classes(), lambda: self._probe(probe))
        # The last trial's outputs, kept alive so their memory cannot be handed out again: a new
        # output in that memory is a workspace the candidate kept and returned once more.
        self.previous: list[torch.Tensor] = []
        self.timing_specs: dict[int, list[Any]] = {}
        self.where: tuple[int | None, int] = (None, 0)  # (trial, call) the findings belong to
        self.monitor.emit = self._emit

    def _emit(self, kind: str, detail: str) -> None:
        trial, call = self.where
        self.send({"event": "finding", "trial": trial, "call": call, "kind": kind, "detail": detail})

    def _watched_classes(self) -> list[type]:
        from torch.utils._python_dispatch import TorchDispatchMode
        from triton.runtime import interpreter
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.jit import JITFunction, KernelInterface

        return [
            torch.Tensor,
            TorchDispatchMode,
            type(self.mode),
            JITFunction,
            KernelInterface,
            Autotuner,
            Heuristics,
            interpreter.InterpretedFunction,
            interpreter.GridExecutor,
            interpreter.InterpreterBuilder,
            torch.UntypedStorage,
        ]

    def warm_up(self) -> None:
        filename = f"<{secrets.token_hex(5)}>"
        self.attribution.add_harness_file(filename)
        linecache.cache[filename] = (len(_WARM_UP), None, _WARM_UP.splitlines(True), filename)
        name = f"_{secrets.token_hex(6)}"
        module = types.ModuleType(name)
        sys.modules[name] = module  # Triton looks kernels' modules up by name
        try:
            exec(compile(_WARM_UP, filename, "exec"), vars(module))
            x = torch.zeros((16,), dtype=torch.float32, device=self.device)
            module.warm[(1,)](x, 16, BLOCK=16)
            if self.device.type != "cpu":
                torch.get_device_module(self.device.type).synchronize()
        finally:
            del sys.modules[name]
        warm = io.BytesIO()  # and the harness's own first save/load settles torch's lazy state
        _SAVE({"warm": torch.zeros(2)}, warm)
        _LOAD(io.BytesIO(warm.getvalue()), weights_only=True)

    def _probe(self, event: str) -> bool:
        before = self.audit.probes_seen
        sys.audit(event)
        return self.audit.probes_seen == before + 1

    # --- instruments -------------------------------------------------------------------------------
    def install(self) -> None:
        self.launch_hooks.install()
        self.host_guards.install()
        if self.interp is not None:
            self.interp.install()

    def uninstall(self) -> None:
        if self.interp is not None:
            self.interp.uninstall()
        self.host_guards.uninstall()
        self.launch_hooks.uninstall()

    # --- channel -----------------------------------------------------------------------------------
    def send(self, event: Mapping[str, Any], blob: bytes | None = None) -> None:
        proto.write_json(self.fd_out, event)
        if blob is not None:
            proto.write_frame(self.fd_out, proto.BLOB, blob)

    def receive(self, kind: bytes = proto.BLOB) -> bytes:
        frame = proto.read_frame(self.fd_in, MAX_BLOB_BYTES)
        if frame is None:
            raise EOFError("the parent closed the plan pipe early")
        if frame[0] != kind:
            raise ValueError(f"expected a {kind!r} frame from the parent, got {frame[0]!r}")
        return frame[1]

    def next_trial(self) -> proto.TrialPlan | None:
        """The next trial's plan, sent once the last one was reported; None after the last."""
        event = json.loads(self.receive(proto.JSON))
        return None if event.get("end") else proto.TrialPlan.from_json(event["trial"])

    # --- windows -----------------------------------------------------------------------------------
    def _window_checks(self, tensors: list[torch.Tensor]) -> None:
        problems = self.integrity.check(self.mode)
        for t in tensors:
            if type(t) is not torch.Tensor:
                problems.append("an input tensor's class was changed (__class__ assignment)")
            elif vars(t):
                problems.append("attributes were attached to an input tensor")
        for problem in problems[:20]:
            self.monitor.record("tamper", problem)

    def _finish(self, report: proto.CallReport) -> None:
        report.findings = dict(self.monitor.findings)
        if report.monitored:
            report.launches = self.monitor.launches
        report.stalled = self.monitor.stalled

    def import_candidate(self) -> Any:
        path = Path(self.plan.candidate)
        name = _module_name(path)
        self.integrity.ignore.add(name)
        report = proto.CallReport(kind="import")
        self.monitor.reset()
        error: str | None = None
        entry = None
        with self.mode:
            with self.monitor.observing():
                try:
                    spec = importlib.util.spec_from_file_location(name, path)
                    if spec is None or spec.loader is None:
                        raise ImportError(f"cannot load {path}")
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[name] = module  # Triton looks kernels' modules up by name
                    spec.loader.exec_module(module)
                    entry = getattr(module, self.plan.entry, None)
                    if not callable(entry):
                        raise AttributeError(f"candidate has no callable {self.plan.entry!r}")
                except BaseException as exc:  # SystemExit too
                    error = _describe(exc)
            self._window_checks([])
            self.integrity.snapshot()  # import-time changes are reported below; calls start from here
        self._finish(report)
        self.send({"event": "import", "findings": report.findings, "error": error})
        return None if error else entry

    def call(
        self, entry: Any, args: list[Any], tensors: list[torch.Tensor], plan: proto.CallPlan
    ) -> tuple[proto.CallReport, list[torch.Tensor | None]]:
        report = proto.CallReport(kind=plan.kind, order=plan.order, monitored=plan.monitored)
        self.monitor.reset()
        result: object = None
        if self.autotune is not None:  # every call draws its autotuned configs anew
            self.autotune.forget()
        pad = secrets.randbelow(MAX_PAD_FRAMES + 1)
        start = time.perf_counter()
        if plan.monitored:
            if self.interp is not None:
                self.interp.order = plan.order
            self.monitor.plain = not plan.guarded
            with self.mode:
                with self.monitor.observing():
                    try:
                        result = _call_entry(entry, args, pad)
                    except BaseException as exc:  # SystemExit too: a candidate that exits has crashed
                        report.error = _describe(exc)
                self._window_checks(tensors)
            self.monitor.plain = False
        else:
            # A blind call: nothing the candidate can see without introspecting Triton is left (the
            # interpreter's bounds checks stay: they stop wild stores, in natural program order).
            self.uninstall()
            launched = self.interp.launches if self.interp is not None else 0
            if self.interp is not None:
                self.interp.order = "natural"
                self.interp.install()
            try:
                result = _call_entry(entry, args, pad)
            except BaseException as exc:
                report.error = _describe(exc)
            finally:
                if self.interp is not None:  # counted by the interpreter, unseen by the candidate
                    report.launches = self.interp.launches - launched
                if self.interp is not None:
                    self.interp.uninstall()
                self.install()
        try:
            if self.device.type != "cpu":
                torch.get_device_module(self.device.type).synchronize()
        except BaseException as exc:
            report.error = report.error or _describe(exc)
        report.elapsed_s = time.perf_counter() - start
        if plan.monitored and self.monitor.scratch_damaged():
            self.monitor.record("oob_write", "a guard band around a candidate allocation was overwritten")
        self._finish(report)
        outputs = _plain(result) if report.error is None else []
        report.output_views = [out is not None and out._base is not None for out in outputs]
        report.output_reused = [out is not None and self._reused(out) for out in outputs]
        if any(out is not None and vars(out) for out in outputs):
            report.findings.setdefault("tamper", []).append("attributes were attached to an output tensor")
        return report, outputs

    def _reused(self, out: torch.Tensor) -> bool:
        lo, hi = _span(out)
        return any(lo < b and a < hi for a, b in map(_span, self.previous))

    # --- trials ------------------------------------------------------------------------------------
    def run_trial(self, entry: Any, trial: proto.TrialPlan) -> bool:
        specs = list(_LOAD(io.BytesIO(self.receive()), weights_only=True))
        refill = list(_LOAD(io.BytesIO(self.receive()), weights_only=True)) if trial.refill else None
        if trial.timed:
            self.timing_specs[trial.index] = specs
        if self.interp is not None:
            self.interp.seed = trial.seed
        plain = not all(c.monitored and c.guarded for c in trial.calls)
        inputs: list[_Input | None] = []
        args: list[Any] = []
        for spec in specs:
            if isinstance(spec, dict) and "storage" in spec:
                item = _Input(spec, self.device, None if plain else self.params)
                inputs.append(item)
                args.append(item.tensor)
            else:
                inputs.append(None)
                args.append(spec)
        tensors = [i.tensor for i in inputs if i is not None]
        if self.interp is not None:  # stores into these while the candidate runs are input_written
            self.interp.inputs = list(tensors)
        # copies of their data from the candidate's frames are torch_compute (monitor.py)
        self.monitor.inputs = [] if self.plan.allow_input_copies else list(args)
        reports, saved, outputs_seen = [], [], []
        ok = True
        for number, plan in enumerate(trial.calls):
            self.where = (trial.index, number)
            if plan.kind == "refill" and refill is not None:
                for held, spec in zip(inputs, refill, strict=True):
                    if held is not None:
                        held.refill(spec)
            sampling = self._sampling(trial, tensors)
            report, outputs = self.call(entry, args, tensors, plan)
            reports.append(asdict(report))
            with _NO_SUBCLASS():
                snapshots = [i.snapshot() if i else None for i in inputs]
            saved.append({"outputs": outputs, "inputs": snapshots, **self._sampled(sampling, outputs)})
            outputs_seen += [o for o in outputs if o is not None]
            if report.error is not None and not report.stalled:
                ok = False
                break
        buffer = io.BytesIO()
        with _NO_SUBCLASS():
            live = [_alias(a) if isinstance(a, torch.Tensor) else a for a in args]
        _SAVE({"calls": saved, "live": live}, buffer)
        self.send({"event": "trial", "index": trial.index, "calls": reports, "blob": True}, buffer.getvalue())
        self.previous = outputs_seen
        return ok

    def _sampling(self, trial: proto.TrialPlan, tensors: list[torch.Tensor]) -> Sampling | None:
        """A device-shape trial runs a sample of every launch's programs (sampling.py)."""
        if self.interp is None:
            return None
        sampling = None
        if trial.sample is not None:
            request = SampleRequest.from_json(trial.sample)
            sampling = Sampling(request, tensors, lambda: self.monitor.allocations, self.params)
        self.interp.sampling = sampling
        return sampling

    def _sampled(self, sampling: Sampling | None, outputs: list[torch.Tensor | None]) -> dict[str, Any]:
        """What a sampled call adds to the blob: per output, the elements its executed programs own."""
        if sampling is None:
            return {}
        if self.interp is not None:
            self.interp.sampling = None
        with _NO_SUBCLASS():
            states = [sampling.output_state(o) if o is not None else None for o in outputs]
        return {"states": states, "sampled": sampling.summary(), "atomics_sampled": sampling.atomics_sampled}

    def run_timing(self, entry: Any) -> None:
        assert self.plan.timing is not None
        config = BenchConfig(**self.plan.timing)
        clock = TorchDeviceClock(self.device, config.flush_bytes)
        self.uninstall()
        for index, specs in sorted(self.timing_specs.items()):
            args = [
                _Input(s, self.device, None).tensor if isinstance(s, dict) and "storage" in s else s
                for s in specs
            ]

            def call(args: list[Any] = args) -> Any:
                return entry(*args)

            samples = bench(call, clock, config)
            self.send({"event": "timing", "index": index, "samples_ms": samples})

    def run(self) -> int:
        if self.autotune is not None:
            install_autotune_bench(self.autotune)
        self.install()
        self.warm_up()
        with self.mode:  # checks run inside the mode: the baseline is its state there
            self.integrity.snapshot()
        entry = self.import_candidate()
        if entry is None:
            return 3
        while (trial := self.next_trial()) is not None:
            if not self.run_trial(entry, trial):
                return 4
        if self.plan.timing and self.timing_specs:
            self.run_timing(entry)
        self.send({"event": "done"})
        return 0


def run(plan: Mapping[str, Any], fd_in: int, fd_out: int, harness: Mapping[str, dict[str, Any]]) -> int:
    """Entry point called by the bootstrap with the harness modules' namespaces."""
    try:
        parsed = proto.Plan.from_json(plan)
    except (KeyError, TypeError, ValueError) as exc:
        print(f"bad plan: {exc}", file=sys.stderr)
        return 2
    _limit_resources()
    if parsed.device.startswith("npu"):
        importlib.import_module("torch_npu")
    return Runner(parsed, fd_in, fd_out, harness).run()
