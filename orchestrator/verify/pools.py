"""Verification pools (where a candidate runs) and the environment record of a result.

Imports neither torch nor pydantic at module level: the CLI reads the pool table before it starts
the fork server, whose imports then overlap its own.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.verify.models import EnvironmentInfo


@dataclass(frozen=True)
class PoolSpec:
    name: str
    device: str
    interpret: bool  # TRITON_INTERPRET=1: the CPU screen on small shapes
    timing: bool  # device timing is meaningful only on real devices
    timeout_s: float  # default wall-clock limit for the child


POOLS: Mapping[str, PoolSpec] = MappingProxyType(
    {
        "cpu": PoolSpec("cpu", "cpu", interpret=True, timing=False, timeout_s=300.0),
        "cuda": PoolSpec("cuda", "cuda", interpret=False, timing=True, timeout_s=600.0),
        "npu": PoolSpec("npu", "npu", interpret=False, timing=True, timeout_s=600.0),
    }
)
_ALIASES = MappingProxyType({"gpu": "cuda", "nvidia": "cuda", "ascend": "npu"})

# dtypes the interpreter cannot run faithfully: skipped on interpreted pools, reported as unverifiable.
INTERPRETER_UNFAITHFUL_DTYPES = frozenset({"bfloat16"})


def pool_spec(name: str) -> PoolSpec:
    key = _ALIASES.get(name, name)
    if key not in POOLS:
        raise ValueError(f"unknown pool {name!r}; known: {sorted(POOLS)}")
    return POOLS[key]


def device_available(spec: PoolSpec) -> bool:
    if spec.device == "cpu":
        return True
    import torch

    try:
        return bool(torch.get_device_module(spec.device).is_available())
    except (AttributeError, RuntimeError):  # e.g. torch_npu not installed
        return False


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _device_name(spec: PoolSpec) -> str | None:
    if spec.device == "cpu":
        return platform.processor() or platform.machine()
    import torch

    try:
        module = torch.get_device_module(spec.device)
        return str(module.get_device_name()) if module.is_available() else None
    except (AttributeError, RuntimeError):
        return None


def environment(spec: PoolSpec) -> EnvironmentInfo:
    import torch

    from orchestrator.verify.models import EnvironmentInfo

    return EnvironmentInfo(
        python=platform.python_version(),
        torch=torch.__version__,
        triton=_version("triton") or "missing",
        numpy=_version("numpy"),
        triton_interpret="1" if spec.interpret else None,
        platform=platform.platform(),
        device=spec.device,
        device_name=_device_name(spec),
    )
