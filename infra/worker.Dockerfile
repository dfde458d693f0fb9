# The job worker image (CPU): the service image plus the verification harness's torch, Triton and
# numpy. Triton runs kernels in its interpreter (TRITON_INTERPRET=1), so no accelerator is needed.
# `kswarm images build` builds it after kswarm/kswarm; a torch wheel in infra/wheels/ (or --wheels DIR)
# is used instead of a download (the CPU build; PyPI's plain `torch` is a multi-GB CUDA build).
# The GPU variant is infra/worker-cuda.Dockerfile.
ARG SERVICE_IMAGE=kswarm/kswarm:latest
FROM ${SERVICE_IMAGE}

ARG TORCH_VERSION=2.13.0
# Where pip finds the CPU build of torch when infra/wheels/ has none ("" when it has one).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG PIP_INDEX_URL
ARG PIP_CERT
COPY infra/wheels/ /tmp/wheels/
RUN /opt/kswarm/bin/pip install --no-cache-dir --disable-pip-version-check --find-links /tmp/wheels \
      ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} "torch==${TORCH_VERSION}" "triton>=3.2" "numpy>=1.26" \
 && rm -rf /tmp/wheels \
 && /opt/kswarm/bin/python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
ENV TRITON_INTERPRET=1
CMD ["python", "-m", "orchestrator.worker", "--help"]
