#!/usr/bin/env bash
# Build the PaddleBERT image from the Dockerfile at the repository root, optionally push it.
#
#   bash scripts/docker/build.sh [image (paddlebert:latest)] [push | none (none)]
#   FROM_IMAGE_NAME=nvidia/cuda:<version>-base-ubuntu24.04 bash scripts/docker/build.sh
#
# FROM_IMAGE_NAME (environment) replaces the Dockerfile's base image. Push the image to a registry the
# cluster nodes can pull from to use it with run.sub (CONT=<registry>/<image>).
set -euo pipefail

IMAGE=${1:-paddlebert:latest}
PUSH=${2:-none}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/common.sh
source "$ROOT/scripts/common.sh"
require_choice push "$PUSH" push none

build_args=()
[[ -n "${FROM_IMAGE_NAME:-}" ]] && build_args=(--build-arg "FROM_IMAGE_NAME=$FROM_IMAGE_NAME")
run_logged "" docker build --network=host --pull --tag "$IMAGE" "${build_args[@]}" "$ROOT"
if [[ "$PUSH" == push ]]; then
  run_logged "" docker push "$IMAGE"
fi
