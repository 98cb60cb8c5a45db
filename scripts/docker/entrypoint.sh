#!/usr/bin/env bash
# The image's entrypoint: check the NVIDIA driver against CUDA 12.6 (what the image's Paddle is built for), then
# run the command (default: bash). Refuses to start, in one line, when the driver is too old for any CUDA 12 program;
# warns when it only runs through CUDA's minor version compatibility, and when no GPU is visible.
set -euo pipefail

# CUDA 12.6.3's own minimum driver, and the oldest driver that CUDA 12.x minor version compatibility allows.
readonly cuda_driver=560.35.05 compatibility_driver=525.60.13

version_at_least() {  # version minimum: true when version >= minimum (dotted numbers)
  [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V)" == "$2"$'\n'"$1" || "$1" == "$2" ]]
}

driver=""
if command -v nvidia-smi > /dev/null; then
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2> /dev/null)" || driver=""
  driver="${driver%%$'\n'*}"  # one line per GPU, all the same driver
fi
if [[ -z "$driver" ]]; then
  echo "paddlebert: warning: no NVIDIA GPU visible (nvidia-smi found none); Paddle will run on the CPU" >&2
elif ! version_at_least "$driver" "$compatibility_driver"; then
  echo "paddlebert: NVIDIA driver $driver is older than $compatibility_driver, the oldest that runs CUDA 12.6" \
    "programs (by minor version compatibility); update the host's driver" >&2
  exit 1
elif ! version_at_least "$driver" "$cuda_driver"; then
  echo "paddlebert: warning: NVIDIA driver $driver is older than CUDA 12.6.3's $cuda_driver; it runs CUDA 12.6" \
    "by minor version compatibility, without JIT compilation of newer PTX" >&2
fi
(( $# > 0 )) || set -- bash
exec "$@"
