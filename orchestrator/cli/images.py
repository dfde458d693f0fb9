"""``kswarm images build``: every image kswarm runs, built from this checkout on a fresh machine.

The images (compose.yaml uses all of them; docs/deploy.md):

| image | Dockerfile | what runs from it |
|---|---|---|
| ``kswarm/kswarm`` | ``infra/kswarm.Dockerfile`` | the gateway, the orchestrator, Redis, compose's init |
| ``kswarm/worker`` | ``infra/worker.Dockerfile`` | job workers: kswarm + torch (CPU), Triton, numpy |
| ``kswarm/agent`` | ``infra/agent.Dockerfile`` | agents of the docker backend (``host_shared: false``) |
| ``kswarm/empty`` | (an empty tar) | agents and jobs of the host-shared mode |

Every image builds ``FROM debian:bookworm-slim``: pulled where a registry serves it, else
debootstrapped once (``infra/ci/base-image.sh``). The build context is streamed from here (only the
package, the compose helpers and the wheels a build should take locally), so no ``.dockerignore``
and no registry for torch: a ``torch-<version>`` wheel in ``infra/wheels/``, in ``--wheels DIR`` or in
pip's ``PIP_FIND_LINKS`` dirs goes into the worker image instead of a download.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli.commands import command
from orchestrator.cli.output import console, err_console, fail, print_json

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "debian:bookworm-slim"
TORCH_VERSION = "2.13.0"
PACKAGE = (
    "pyproject.toml",
    "README.md",
    "gateway",
    "orchestrator",
    "agents",
    "kswarm_contracts",
    "infra/compose",
)
SKIPPED = ("__pycache__", ".pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: str
    purpose: str
    wheels: bool = False  # the context carries infra/wheels/ (torch)


IMAGES = (
    Image("kswarm", "infra/kswarm.Dockerfile", "gateway, orchestrator, Redis, compose init"),
    Image("worker", "infra/worker.Dockerfile", "job worker: torch (CPU), Triton, numpy", wheels=True),
    Image("agent", "infra/agent.Dockerfile", "agents of the docker backend"),
)
IMAGE_NAMES = [i.name for i in IMAGES]


class ImageBuildError(RuntimeError):
    """A build failed; the message is one line (the build's last lines are printed before)."""


def image_tag(prefix: str, name: str, tag: str) -> str:
    return f"{prefix}/{name}:{tag}"


def torch_wheels(dirs: list[Path], version: str = TORCH_VERSION) -> list[Path]:
    """``torch-<version>`` wheels for this interpreter's tag family (cp311) in ``dirs``."""
    found: list[Path] = []
    for d in dirs:
        if d.is_dir():
            found += sorted(p for p in d.glob(f"torch-{version}*-cp311-*.whl") if p.is_file())
    return found[:1]


def wheel_dirs(extra: list[Path]) -> list[Path]:
    """Where to look for wheels: ``--wheels``, ``infra/wheels/``, pip's local ``PIP_FIND_LINKS`` dirs."""
    links = [Path(p) for p in os.environ.get("PIP_FIND_LINKS", "").split() if p.startswith("/")]
    return [*extra, REPO / "infra" / "wheels", *links]


def _walk(root: Path, rel: str) -> Iterator[tuple[Path, str]]:
    path = root / rel
    if path.is_file():
        yield path, rel
        return
    for sub in sorted(path.rglob("*")):
        if any(part in SKIPPED or part.endswith(".pyc") for part in sub.parts) or not sub.is_file():
            continue
        yield sub, str(sub.relative_to(root))


def build_context(image: Image, wheels: list[Path], root: Path = REPO) -> bytes:
    """The tar the daemon builds from: the package, the Dockerfile, and (worker) ``infra/wheels/``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in (*PACKAGE, image.dockerfile):
            for path, name in _walk(root, rel):
                tar.add(path, arcname=name, recursive=False)
        wheel_dir = tarfile.TarInfo("infra/wheels")
        wheel_dir.type, wheel_dir.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(wheel_dir)
        for wheel in wheels if image.wheels else []:
            tar.add(wheel, arcname=f"infra/wheels/{wheel.name}", recursive=False)
    return buf.getvalue()


def ensure_base(base: str = BASE_IMAGE, root: Path = REPO) -> None:
    """The base image in the daemon: pulled, or debootstrapped where no registry serves it."""
    done = subprocess.run(
        ["bash", str(root / "infra" / "ci" / "base-image.sh"), base], capture_output=True, text=True
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise ImageBuildError(f"no base image {base}: {lines[-1] if lines else 'base-image.sh failed'}")


def build_image(
    client: Any, image: Image, tag: str, build_args: dict[str, str], wheels: list[Path], quiet: bool
) -> None:
    out = err_console if quiet else console
    """One ``docker build`` through the SDK; the build's output streams to the terminal unless quiet."""
    tail: list[str] = []
    stream = client.api.build(
        fileobj=io.BytesIO(build_context(image, wheels)),
        custom_context=True,
        dockerfile=image.dockerfile,
        tag=tag,
        buildargs=build_args,
        network_mode="host",  # RUN steps reach the package registries through the host's network
        rm=True,
        forcerm=True,
        decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            for line in tail[-15:]:
                out.print(f"    {line}", markup=False, highlight=False, soft_wrap=True)
            raise ImageBuildError(f"building {tag} failed: {' '.join(str(chunk['error']).split())[:300]}")
        text = str(chunk.get("stream", "")).rstrip()
        if text:
            tail.append(text)
            if not quiet and (text.startswith("Step ") or "torch" in text):
                console.print(f"    {text}", markup=False, highlight=False, soft_wrap=True)


def build_all(
    names: list[str],
    prefix: str = "kswarm",
    tag: str = "latest",
    extra_wheels: list[Path] | None = None,
    quiet: bool = False,
    client: Any = None,
    as_json: bool = False,
) -> list[str]:
    """Build ``names`` (each from the base image); returns the tags. Progress goes to stderr under
    ``as_json`` (stdout is the JSON document alone)."""
    progress = err_console if as_json else console
    from orchestrator.runtime.docker import docker_client, ensure_empty_image

    client = client or docker_client(timeout=3600)
    ensure_base()
    wheels = torch_wheels(wheel_dirs(extra_wheels or []))
    common = {"BASE_IMAGE": BASE_IMAGE}
    if CA_BUNDLE.is_file():  # the debootstrapped base carries this machine's CA bundle at the same path
        common["PIP_CERT"] = str(CA_BUNDLE)
    built: list[str] = []
    for image in IMAGES:
        if image.name not in names:
            continue
        full = image_tag(prefix, image.name, tag)
        args = dict(common)
        if image.name == "worker":
            args["TORCH_VERSION"] = TORCH_VERSION
            if wheels:
                args["TORCH_INDEX"] = ""  # the local wheel, no index
        source = f" (torch from {wheels[0].name})" if image.wheels and wheels else ""
        progress.print(
            f"building [bold]{full}[/] from {image.dockerfile}{source} ...", highlight=False, soft_wrap=True
        )
        build_image(client, image, full, args, wheels, quiet)
        built.append(full)
    ensure_empty_image(client)
    built.append("kswarm/empty:latest")
    return built


app = typer.Typer(help="The Docker images kswarm runs (compose.yaml, the docker backend).")


@command(app, "build")
def build(
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help=f"Build only these ({', '.join(IMAGE_NAMES)}); repeatable."),
    ] = None,
    prefix: Annotated[str, typer.Option("--prefix", help="Repository prefix of the tags.")] = "kswarm",
    tag: Annotated[str, typer.Option("--tag", help="Tag of every image.")] = "latest",
    wheels: Annotated[
        list[Path] | None,
        typer.Option("--wheels", help="A dir of wheels (torch) to build from instead of a download."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only what was built.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the built tags as JSON.")] = False,
) -> None:
    """Build every image from this checkout (the base is pulled, or debootstrapped where no
    registry serves it). Needs a Docker daemon (DOCKER_HOST) and the package registries."""
    from orchestrator.runtime.docker import DockerSetupError

    names = only or IMAGE_NAMES
    unknown = sorted(set(names) - set(IMAGE_NAMES))
    if unknown:
        fail(f"unknown image {', '.join(unknown)}: choose from {', '.join(IMAGE_NAMES)}", 2)
    try:
        built = build_all(names, prefix, tag, wheels, quiet or as_json, as_json=as_json)
    except DockerSetupError as exc:
        fail(str(exc), 3)
    except ImageBuildError as exc:
        fail(str(exc), 1)
    if as_json:
        print_json({"built": built})
        return
    for full in built:
        console.print(f"built {full}", highlight=False)
