# PaddleBERT on NVIDIA's PaddlePaddle NGC container (GPU Paddle, CUDA, cuDNN, NCCL come with the image).
# Build and run with scripts/docker/build.sh and scripts/docker/launch.sh; choose the image with
#   docker build --build-arg FROM_IMAGE_NAME=nvcr.io/nvidia/paddlepaddle:<yy.mm>-py3 .
# PaddleBERT needs Python >= 3.11 (requirements.txt pins numpy 2.4) and Paddle >= 3.0: the build stops with a
# message naming both versions if the base image is older.
ARG FROM_IMAGE_NAME=nvcr.io/nvidia/paddlepaddle:24.05-py3
FROM ${FROM_IMAGE_NAME}

ENV BERT_PREP_WORKING_DIR=/workspace/bert/data
WORKDIR /workspace/bert

RUN python -c "import sys, paddle; major = paddle.__version__.split('.')[0]; \
ok = sys.version_info >= (3, 11) and (major == '0' or int(major) >= 3); \
sys.exit(0 if ok else 'base image has Python %s and Paddle %s; PaddleBERT needs Python >= 3.11 and Paddle >= 3.0' \
% (sys.version.split()[0], paddle.__version__))"

# requirements.txt pins the CPU wheel of Paddle; the image's GPU build stays.
COPY requirements.txt ./
RUN grep -v -E '^paddlepaddle([=<>~! ]|$)' requirements.txt > /tmp/requirements-image.txt \
    && pip install --no-cache-dir -r /tmp/requirements-image.txt \
    && rm /tmp/requirements-image.txt

COPY . .
