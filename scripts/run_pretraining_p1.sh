#!/usr/bin/env bash
# Phase 1 of BERT pre-training with named arguments: NVIDIA's phase-1 recipe (BERT-large, 8 GPUs, float16 AMP,
# global batch 256 x 32 x 8 = 65536 at sequence length 128, 7038 LAMB steps) as the defaults. Any
# run_pretraining.py option given here replaces the default (python run_pretraining.py --help lists them):
#
#   bash scripts/run_pretraining_p1.sh
#   bash scripts/run_pretraining_p1.sh --gpus 1 --precision fp32 --batch-size 64 --input-dir my/phase1/parquet
#
# Launcher options: --gpus N (8), --precision fp32|tf32|amp|fp16|bf16 (amp), --fuse-mha true|false (true).
# Rerunning continues from the newest checkpoint (--last-step-of-checkpoint auto). Paths default to
# $BERT_PREP_WORKING_DIR (<repo>/data) and <repo>/results.
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
set_recipe_dirs

DEFAULT_FLAGS=(
  --input-dir "$BERT_PREP_WORKING_DIR/pretrain/phase1/unbinned/parquet"
  --batch-size 256 --gradient-merge-steps 32
  --max-steps 7038 --learning-rate 6e-3 --warmup-proportion 0.2843
)
launch_phase_with_named_args 1 "$@"
