# The job worker image for NVIDIA GPUs (documented; not built in CI: no GPU and no registry there).
# Based on the vendor's CUDA runtime image, with kswarm and the CUDA build of torch (which brings its
# own Triton). Build it on a machine that reaches Docker Hub and PyPI:
#   docker build --network host -f infra/worker-cuda.Dockerfile -t kswarm/worker-cuda .
# and run the worker with the GPUs of its node (compose: `deploy.resources.reservations.devices`
# with `capabilities: [gpu]`, or `docker run --gpus all`); the pool says `device: cuda` and
# `executor: local` (docs/deploy.md). For Ascend NPUs use CANN's base image the same way
# (ascendai/cann:<version>, torch + torch_npu), with /dev/davinci* and the driver mounted.
ARG CUDA_BASE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${CUDA_BASE}

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv git ca-certificates bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/kswarm

WORKDIR /opt/kswarm-src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY orchestrator ./orchestrator
COPY agents ./agents
COPY kswarm_contracts ./kswarm_contracts
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
# kswarm's dependencies into the venv, the tree itself into a directory of its own on the venv's path
# (a .pth, as an editable install does): the harness's fork server leaves the tree's root off the
# candidates' sys.path (orchestrator/verify/forkserver.py), and that root must not be where torch lives.
RUN /opt/kswarm/bin/pip install --no-cache-dir --extra-index-url "$TORCH_INDEX" \
      "torch==${TORCH_VERSION}" ".[worker,verify]" \
 && /opt/kswarm/bin/pip uninstall -y -q kswarm \
 && /opt/kswarm/bin/pip install --no-cache-dir --no-deps --target /opt/kswarm-code . \
 && echo /opt/kswarm-code > "$(/opt/kswarm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kswarm-code.pth" \
 && rm -rf /opt/kswarm-src \
 && ln -s /opt/kswarm/bin/python /usr/local/bin/python
COPY infra/compose /opt/kswarm/compose
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 KSWARM_HOME=/var/lib/kswarm
WORKDIR /var/lib/kswarm
# Every module the harness and its child import: a missing dependency fails the build, not every job.
RUN python -c "import orchestrator.verify.harness, orchestrator.verify.runner, orchestrator.verify.interp_schedule"
CMD ["python", "-m", "orchestrator.worker", "--help"]
