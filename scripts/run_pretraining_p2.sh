#!/usr/bin/env bash
# Phase 2 of BERT pre-training with named arguments: NVIDIA's phase-2 recipe (BERT-large, 8 GPUs, float16 AMP,
# global batch 32 x 128 x 8 = 32768 at sequence length 512, 1563 LAMB steps, starting from phase 1's final
# weights) as the defaults. Any run_pretraining.py option given here replaces the default
# (python run_pretraining.py --help lists them):
#
#   bash scripts/run_pretraining_p2.sh
#   bash scripts/run_pretraining_p2.sh --gpus 1 --from-phase1-final-params results/bert-large-uncased/phase1/7038
#
# Launcher options: --gpus N (8), --precision fp32|tf32|amp|fp16|bf16 (amp), --fuse-mha true|false (true).
# Rerunning continues from the newest phase-2 checkpoint (--last-step-of-checkpoint auto); phase 1's weights
# are loaded only when phase 2 starts. Paths default to $BERT_PREP_WORKING_DIR (<repo>/data) and <repo>/results.
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
set_recipe_dirs

DEFAULT_FLAGS=(
  --input-dir "$BERT_PREP_WORKING_DIR/pretrain/phase2/bin_size_64/parquet"
  --from-phase1-final-params "$CODEDIR/results/bert-large-uncased/phase1/7038"
  --batch-size 32 --gradient-merge-steps 128
  --max-steps 1563 --learning-rate 4e-3 --warmup-proportion 0.128
)
launch_phase_with_named_args 2 "$@"
