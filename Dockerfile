# PaddleBERT with the CUDA 12.6 build of Paddle 3 (the version requirements.txt pins), from Paddle's wheel index for
# CUDA 12.6 (cu126). That wheel brings CUDA 12.6's libraries (cuBLAS, cuDNN, NCCL, ...) as its pip dependencies
# (nvidia-*-cu12), so the base image is NVIDIA's CUDA 12.6.3 "base" image: the CUDA 12.6 runtime and the driver
# compatibility files, and no second cuDNN or NCCL of another version for Paddle to pick up by mistake (the NGC
# PaddlePaddle 24.05 image used before has CUDA 12.4). Ubuntu 24.04 gives Python 3.12.
#
# Driver: CUDA 12.6.3 wants a driver >= 560.35.05. Through CUDA's minor version compatibility any CUDA 12.x
# program also runs on a driver >= 525.60.13, without the features that need a newer driver (chiefly JIT
# compilation of PTX built by a newer toolkit). scripts/docker/entrypoint.sh refuses to start below 525.60.13 and
# warns below 560.35.05 (and when no GPU is visible). Slurm's pyxis does not run image entrypoints.
#
# Build and run with scripts/docker/build.sh and scripts/docker/launch.sh; for CUDA 12.9, pass both
#   --build-arg FROM_IMAGE_NAME=nvidia/cuda:12.9.1-base-ubuntu24.04
#   --build-arg PADDLE_INDEX_URL=https://www.paddlepaddle.org.cn/packages/stable/cu129/
# and change the driver versions in scripts/docker/entrypoint.sh to CUDA 12.9's.
ARG FROM_IMAGE_NAME=nvidia/cuda:12.6.3-base-ubuntu24.04
FROM ${FROM_IMAGE_NAME}
ARG PADDLE_INDEX_URL=https://www.paddlepaddle.org.cn/packages/stable/cu126/

# Ubuntu's own packages of the release: python3, venv (24.04's system Python refuses pip installs), jemalloc for
# run.sub's preprocessing (USE_JEMALLOC), curl and CA certificates for data/create_datasets_from_start.sh.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends python3 python3-venv libjemalloc2 curl ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/paddlebert
ENV PATH=/opt/paddlebert/bin:$PATH \
    BERT_PREP_WORKING_DIR=/workspace/bert/data
WORKDIR /workspace/bert

# requirements.txt pins the CPU wheels of Paddle and ONNX Runtime: their versions are installed as the GPU wheels
# (onnxruntime-gpu, for ONNX Runtime's CUDA execution provider; it finds the cuDNN and cuBLAS that Paddle's wheel
# brings), everything else as pinned there. The check at the end stops the build unless the CUDA build of
# Paddle's version is what imports. Neither this image nor requirements.txt has TensorRT: PaddleBERT offers no
# TensorRT route (inference.py says why); to try one, add NVIDIA's TensorRT for CUDA 12.6 (its libraries and its
# Python package) and convert the exported .json program with paddle.tensorrt.convert, or the exported .onnx
# model with TensorRT's own tools. Nobody has run either with PaddleBERT.
COPY requirements.txt ./
RUN paddle_version="$(sed -n 's/^paddlepaddle==\([0-9.]*\)$/\1/p' requirements.txt)" \
    && onnxruntime_version="$(sed -n 's/^onnxruntime==\([0-9.]*\)$/\1/p' requirements.txt)" \
    && pip install --no-cache-dir "paddlepaddle-gpu==${paddle_version}" \
        --index-url "${PADDLE_INDEX_URL}" --extra-index-url https://pypi.org/simple \
    && grep -v -E '^(paddlepaddle|onnxruntime)([=<>~! ]|$)' requirements.txt > /tmp/requirements-image.txt \
    && pip install --no-cache-dir -r /tmp/requirements-image.txt "onnxruntime-gpu==${onnxruntime_version}" \
    && rm /tmp/requirements-image.txt \
    && python -c "import sys, paddle; ok = paddle.__version__ == sys.argv[1] and paddle.is_compiled_with_cuda(); \
sys.exit(0 if ok else 'Paddle %s (CUDA build: %s); PaddleBERT needs the CUDA build of Paddle %s' % (\
paddle.__version__, paddle.is_compiled_with_cuda(), sys.argv[1]))" "${paddle_version}"

COPY scripts/docker/entrypoint.sh /usr/local/bin/paddlebert-entrypoint
COPY . .
ENTRYPOINT ["/usr/local/bin/paddlebert-entrypoint"]
CMD ["bash"]
