# PaddleBERT on NVIDIA's PaddlePaddle NGC container. The image provides CUDA, cuDNN, NCCL, the driver compatibility
# libraries and Python (24.05: Ubuntu 22.04, Python 3.10, CUDA 12.4.1); its Paddle 2.x is replaced by the Paddle 3
# GPU wheel of the version requirements.txt pins, from Paddle's official wheel index for CUDA 12.6 (cu126; the
# index for CUDA 12.9 is .../packages/stable/cu129/). Build and run with scripts/docker/build.sh and
# scripts/docker/launch.sh; choose the images with
#   docker build --build-arg FROM_IMAGE_NAME=nvcr.io/nvidia/paddlepaddle:<yy.mm>-py3 \
#                --build-arg PADDLE_INDEX_URL=https://www.paddlepaddle.org.cn/packages/stable/cu129/ .
ARG FROM_IMAGE_NAME=nvcr.io/nvidia/paddlepaddle:24.05-py3
FROM ${FROM_IMAGE_NAME}
ARG PADDLE_INDEX_URL=https://www.paddlepaddle.org.cn/packages/stable/cu126/

ENV BERT_PREP_WORKING_DIR=/workspace/bert/data
WORKDIR /workspace/bert

# requirements.txt pins the CPU wheel of Paddle: its version is installed as the GPU wheel, everything else as
# pinned there (its environment markers choose the versions that have wheels for the image's Python). The check
# at the end stops the build if the image's Python is older than 3.10 or the GPU wheel did not replace Paddle 2.
COPY requirements.txt ./
RUN paddle_version="$(sed -n 's/^paddlepaddle==\([0-9.]*\)$/\1/p' requirements.txt)" \
    && pip uninstall --yes paddlepaddle-gpu \
    && pip install --no-cache-dir "paddlepaddle-gpu==${paddle_version}" \
        --index-url "${PADDLE_INDEX_URL}" --extra-index-url https://pypi.org/simple \
    && grep -v -E '^paddlepaddle([=<>~! ]|$)' requirements.txt > /tmp/requirements-image.txt \
    && pip install --no-cache-dir -r /tmp/requirements-image.txt \
    && rm /tmp/requirements-image.txt \
    && python -c "import sys, paddle; ok = sys.version_info >= (3, 10) and paddle.__version__ == sys.argv[1] \
and paddle.is_compiled_with_cuda(); sys.exit(0 if ok else 'Python %s with Paddle %s (CUDA build: %s); PaddleBERT \
needs Python >= 3.10 and the CUDA build of Paddle %s' % (sys.version.split()[0], paddle.__version__, \
paddle.is_compiled_with_cuda(), sys.argv[1]))" "${paddle_version}"

COPY . .
