# voicecli speech server for Amazon SageMaker (custom container, port 8080).
# Build: docker build -t voicecli-kokoro .   See docs/sagemaker.md.
FROM python:3.11-slim

# SageMaker routes InvokeEndpointWithBidirectionalStream to the container's
# WebSocket /invocations-bidirectional-stream only when this label is present.
LABEL com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true

# Must equal REVISION in voicecli/tts/kokoro/files.py (a test checks it), so the
# image bakes in exactly the weights and voices the client expects.
ARG KOKORO_REVISION=f3ff3571791e39611d31c381e3a41a3af07b4987
ARG TORCH_VERSION=2.13.0
# Voices baked into the image; requests may name any of them.
ARG KOKORO_VOICES="af_heart af_bella am_adam am_michael bf_emma bm_george"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    VOICECLI_MODEL_DIR=/opt/kokoro

RUN apt-get update \
    && apt-get install -y --no-install-recommends espeak-ng \
    && rm -rf /var/lib/apt/lists/*

# CPU-only torch from PyTorch's CPU index: the default wheel pulls in CUDA (GBs).
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch==${TORCH_VERSION}"

WORKDIR /opt/voicecli
COPY pyproject.toml README.md ./
COPY voicecli ./voicecli
# The project itself: its dependencies' ranges are in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install ".[server]" \
    && python -m spacy download en_core_web_sm

# Fetch the pinned weights now: an endpoint must never reach the hub at start-up.
RUN HF_HUB_OFFLINE=0 python - <<PY
from pathlib import Path
from huggingface_hub import hf_hub_download
repo, rev, out = "hexgrad/Kokoro-82M", "${KOKORO_REVISION}", Path("/opt/kokoro")
names = ["config.json", "kokoro-v1_0.pth"] + [f"voices/{v}.pt" for v in "${KOKORO_VOICES}".split()]
for name in names:
    hf_hub_download(repo_id=repo, filename=name, revision=rev, local_dir=out)
PY

RUN useradd --system --uid 1000 voicecli
USER voicecli

EXPOSE 8080
# SageMaker starts the container as `docker run IMAGE serve`.
ENTRYPOINT ["python", "-m", "voicecli.server.run"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
