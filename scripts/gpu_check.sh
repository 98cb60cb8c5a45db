#!/usr/bin/env bash
# GPU acceptance check: what the first person with a GPU runs. Needs no data: it builds tiny inputs itself.
#
#   bash scripts/gpu_check.sh [--work-dir DIR]
#
# It finds the GPUs Paddle sees, then scripts/gpu_check.py runs each row as its own process: BERT-base
# pretraining in every precision (fp32, tf32, float16 and bfloat16 at O1 and O2) at sequence length 128, some at
# 512, with --fuse-mha and with --pack-sequences, each checked for its step-1 loss against fp32 (rounding apart,
# but apart) and for learning (the loss falls, few skipped steps); the encoder's output on each GPU attention
# path against the CPU path; CPU affinity; a SIGKILL mid-run and a rerun (fp32, float16 O2); an O2 checkpoint
# resumed at O1 (a one-line error); SQuAD training, prediction, export and predictors; GLUE MRPC; and with two
# GPUs a data-parallel step against one process and gradient merge under O1 and O2. It prints a table (row,
# status, figure, tolerance, seconds / budget) and exits 1 when any row FAILs. The budgets are on paper
# (scripts/gpu_check.py): about 18 minutes on one GPU, 24 with the two-GPU rows.
#
# Without a GPU (a CPU build of Paddle, or no device) it runs the fp32 and CPU rows with bert-tiny and tiny
# shapes, so that CI runs it in a few minutes; the other rows print as skipped.
#
# --work-dir DIR   keep the inputs, outputs and one log per row (logs/) in DIR. Default: a new temporary
#                  folder, deleted when every row passes and kept (its path printed) when one fails.
# Data beside the project ($PADDLEBERT_SHARED_DIR, default ../shared) is used when present: data/wikitext-2's
# wiki.test.raw for the pretraining shards (else the offline corpus of data/make_sample_corpus.py), the first
# articles of data/squad/v1.1/dev-v1.1.json and the first lines of data/glue/MRPC (else small synthetic sets).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/common.sh
source "$SCRIPT_DIR/common.sh"

work_dir=""
while (( $# > 0 )); do
  case "$1" in
    --work-dir)
      (( $# >= 2 )) || die "--work-dir needs a folder"
      work_dir="$2"
      shift 2 ;;
    --work-dir=*) work_dir="${1#*=}"; shift ;;
    *) die "unknown argument '$1' (the only option is --work-dir DIR)" ;;
  esac
done

gpus="$(python -c "import paddle; print(paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0)")" \
  || die "python cannot import paddle; install requirements.txt (or paddlepaddle-gpu) first"
require_int "GPU count" "$gpus" 0
echo "GPUs visible to Paddle: $gpus"

temporary=false
if [[ -z "$work_dir" ]]; then
  work_dir="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
  temporary=true
fi
mkdir -p "$work_dir"

status=0
python "$SCRIPT_DIR/gpu_check.py" --gpus "$gpus" --work-dir "$work_dir" || status=$?
if [[ "$temporary" == true ]]; then
  if (( status == 0 )); then
    rm -rf -- "$work_dir"
  else
    echo "inputs, outputs and logs kept in $work_dir"
  fi
fi
exit "$status"
