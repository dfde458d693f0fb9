# The job worker image (CPU): the service image's content plus the verification harness's torch,
# Triton and numpy. Triton runs kernels in its interpreter (TRITON_INTERPRET=1): no accelerator needed.
# `kswarm images build` builds it; a torch wheel in infra/wheels/ (or --wheels DIR) is used instead of a
# download (the CPU build: PyPI's plain `torch` is a multi-GB CUDA build). By hand:
#   docker build --network host -f infra/worker.Dockerfile -t kswarm/worker .
# The GPU variant is infra/worker-cuda.Dockerfile.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv git ca-certificates bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 # Not under a path named kswarm: the harness's fork server drops every sys.path entry naming the
 # distribution (orchestrator/verify/forkserver.py, BOOT), which would take torch with it.
 && python3 -m venv /opt/venv

ARG PIP_INDEX_URL
ARG PIP_CERT
ARG TORCH_VERSION=2.13.0
# Where pip finds the CPU build of torch when infra/wheels/ has none ("" when it has one).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# torch, Triton and numpy first: the heaviest layer, unchanged by any change of kswarm's code.
COPY infra/wheels/ /tmp/wheels/
RUN /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --find-links /tmp/wheels \
      ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "torch==${TORCH_VERSION}" "triton>=3.2" "numpy>=1.26" \
 && rm -rf /tmp/wheels \
 && /opt/venv/bin/python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
WORKDIR /opt/kswarm-src
COPY pyproject.toml README.md ./
# kswarm's dependencies for a job worker (`worker`) and the harness (`verify`: greenlet, ...), so the
# image has every module the worker and a job's child import; torch and triton are already satisfied by
# the layer above. Not the server's: no FastAPI, Redis or pyarrow (tests/test_packaging.py).
RUN mkdir gateway orchestrator agents && touch gateway/__init__.py orchestrator/__init__.py agents/__init__.py \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check ".[worker,verify]" \
 && /opt/venv/bin/pip uninstall -y -q kswarm && rm -rf /opt/kswarm-src/*
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY orchestrator ./orchestrator
COPY agents ./agents
COPY kswarm_contracts ./kswarm_contracts
# The tree in a directory of its own, put on the venv's path by a .pth (as an editable install does),
# never into site-packages: the harness's fork server leaves the tree's root off the candidates'
# sys.path (orchestrator/verify/forkserver.py), and that root must not also be where torch lives.
RUN /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps --target /opt/kswarm-code . \
 && echo /opt/kswarm-code > "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kswarm-code.pth" \
 && rm -rf /opt/kswarm-src \
 # A symlink to the venv's python is not the venv: `python` is a wrapper that execs the venv's.
 && rm -f /usr/local/bin/python \
 && printf '#!/bin/sh\nexec /opt/venv/bin/python "$@"\n' > /usr/local/bin/python \
 && chmod 755 /usr/local/bin/python
COPY infra/compose /opt/kswarm/compose

ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 KSWARM_HOME=/var/lib/kswarm TRITON_INTERPRET=1
WORKDIR /var/lib/kswarm
# Every module the harness and its child import, imported once here (from a directory that exists:
# torch's loader fails in a deleted cwd): a missing dependency fails the build, not every job (each
# would end as "child ended abnormally").
RUN python -c "import orchestrator.verify.harness, orchestrator.verify.runner, orchestrator.verify.interp_schedule"
CMD ["python", "-m", "orchestrator.worker", "--help"]
