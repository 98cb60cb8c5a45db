#!/usr/bin/env bash
# Start a container of the PaddleBERT image with the repository mounted at /workspace/bert, so that data,
# vocab, checkpoints and results written under it stay on the host.
#
#   bash scripts/docker/launch.sh                                  # interactive shell, all GPUs
#   bash scripts/docker/launch.sh "bash scripts/run_pretraining.sh" 0,1 host paddlebert:latest
#
# Arguments (default): command (/bin/bash), GPUs to expose (all), docker network (host), image
# (paddlebert:latest).
set -euo pipefail

COMMAND=${1:-/bin/bash}
NV_VISIBLE_DEVICES=${2:-all}
DOCKER_NETWORK=${3:-host}
IMAGE=${4:-paddlebert:latest}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/common.sh
source "$ROOT/scripts/common.sh"

# A terminal gets an interactive session; from a script or a pipe the command just runs.
terminal_flags=(--interactive)
[[ -t 0 && -t 1 ]] && terminal_flags+=(--tty)
# docker reads --gpus as CSV: a device list with commas must be quoted inside the value.
gpus=all
[[ "$NV_VISIBLE_DEVICES" != all ]] && gpus="\"device=$NV_VISIBLE_DEVICES\""
run_logged "" docker run "${terminal_flags[@]}" --rm --gpus "$gpus" \
  --net="$DOCKER_NETWORK" --shm-size=1g --ulimit memlock=-1 --ulimit stack=67108864 \
  --volume "$ROOT:/workspace/bert" --workdir /workspace/bert "$IMAGE" bash -c "$COMMAND"
