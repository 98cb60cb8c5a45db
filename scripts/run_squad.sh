#!/usr/bin/env bash
# Fine-tune BERT on SQuAD v1.1 (or v2.0, see SQUAD_VERSION below) and/or predict and score: NVIDIA's positional
# interface (same 18 arguments, same order, same defaults). Presets print them:
#
#   bash scripts/run_squad.sh results/bert-large-uncased/phase2/1563
#   bash scripts/run_squad.sh $(source scripts/configs/squad_config.sh && dgxa100-80g_8gpu_amp)
#
# Positional arguments (default):
#    1 init_checkpoint (checkpoints/squad)   pretrained (or, for eval/prediction, fine-tuned) weights: a
#                                             .pdparams file, a folder holding bert_paddle.pdparams, or a
#                                             Hugging Face BERT folder (converted in memory)
#    2 epochs (2)
#    3 batch_size (32)                        per GPU, for training and prediction
#    4 learning_rate (4.6e-5)
#    5 warmup_proportion (0.2)
#    6 precision (amp)                        fp32 | tf32 | amp | fp16 | bf16 (see scripts/common.sh)
#    7 num_gpus (8; 1 where nvidia-smi lists no GPU)   processes (GPUs) on this node
#    8 seed (1)
#    9 squad_dir ($BERT_PREP_WORKING_DIR/download/squad/v$SQUAD_VERSION)   holds train-v<version>.json and
#                                             dev-v<version>.json
#   10 vocab_file (<repo>/vocab/bert-large-uncased-vocab.txt)
#   11 OUT_DIR ($RESULTS_DIR, default <repo>/results)   report and logfile.txt here; the fine-tuned model and
#                                             predictions in <OUT_DIR>/<bert-model>/squad/, as NVIDIA's
#   12 mode (train_eval)                      train | eval | prediction | train_eval ("train eval" too, the
#                                             README's spelling): eval = predict and score, prediction = predict
#   13 CONFIG_FILE (None)                     model config JSON; None: bert-large-uncased
#   14 max_steps (-1)                         optimizer steps instead of epochs when > 0
#   15 enable_benchmark (false)               true: time benchmark_steps after benchmark_warmup_steps
#   16 benchmark_steps (100)
#   17 benchmark_warmup_steps (100)
#   18 fuse_mha (true)                        one fused QKV projection per attention layer
# Environment: BERT_PREP_WORKING_DIR (default <repo>/data), RESULTS_DIR (default <repo>/results), and some that
# NVIDIA's script lacks (it always runs v1.1 in dygraph), so that its 18 positions stay as they are:
#   SQUAD_VERSION (1.1)                       2.0: train-v2.0.json and dev-v2.0.json with unanswerable questions
#                                             (--version-2-with-negative); the presets' squad_dir follows it too
#   NULL_SCORE_DIFF_THRESHOLD (0.0)           SQuAD v2.0 only: answer "" when the null answer's score minus the
#                                             best answer's exceeds this (--null-score-diff-threshold)
#   EXPORT_ONNX (false)                       true: a mode with train also exports the fine-tuned model to
#                                             <OUT_DIR>/<bert-model>/squad/export for Paddle Inference and ONNX
#                                             Runtime (--export-dir, --export-onnx)
#   INFERENCE_BACKEND (unset)                 auto | paddle | onnxruntime | openvino: eval and prediction predict
#                                             with the model exported there, init_checkpoint naming its folder
#                                             (--inference-model-dir, --inference-backend; auto: the fastest
#                                             measured on this kind of CPU)
#   INFERENCE_PRECISION (fp32)                with INFERENCE_BACKEND: fp32 | bf16 | fp16 | int8
#                                             (--inference-precision; docs/inference.md says what runs
#                                             where)
#   INT8_QUANTIZATION (unset)                 with INFERENCE_BACKEND=onnxruntime and INFERENCE_PRECISION=int8:
#                                             dynamic | static | dynamic-per-channel | static-per-channel |
#                                             dynamic-per-channel-outliers (--int8-quantization; static and
#                                             -outliers read the calibration inputs EXPORT_ONNX saved); unset:
#                                             run_squad.py's default for SQuAD
# With num_gpus > 1, Paddle's launcher writes its worker logs to ./log (its default, where NVIDIA's script leaves
# them too) and its own output to log/launcherlog; one process runs without the launcher.
# run_squad.py checks the files (checkpoint, vocab, SQuAD json) and names any that is missing.
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_at_most_args 18 "$@"
set_recipe_dirs

init_checkpoint=${1:-checkpoints/squad}
epochs=${2:-2}
batch_size=${3:-32}
learning_rate=${4:-4.6e-5}
warmup_proportion=${5:-0.2}
precision=${6:-amp}
num_gpus=${7:-8}
seed=${8:-1}
squad_version=${SQUAD_VERSION:-1.1}
require_choice SQUAD_VERSION "$squad_version" 1.1 2.0
squad_dir=${9:-$BERT_PREP_WORKING_DIR/download/squad/v$squad_version}
vocab_file=${10:-$CODEDIR/vocab/bert-large-uncased-vocab.txt}
OUT_DIR=${11:-${RESULTS_DIR:-$CODEDIR/results}}
mode=${12:-train_eval}
CONFIG_FILE=${13:-None}
max_steps=${14:--1}
enable_benchmark=${15:-false}
benchmark_steps=${16:-100}
benchmark_warmup_steps=${17:-100}
fuse_mha=${18:-true}

require_int epochs "$epochs" 1
require_int batch_size "$batch_size" 1
require_int num_gpus "$num_gpus" 1
require_int seed "$seed" 0
require_int benchmark_steps "$benchmark_steps" 1
require_int benchmark_warmup_steps "$benchmark_warmup_steps" 0
require_learning_rate learning_rate "$learning_rate"
require_warmup_proportion warmup_proportion "$warmup_proportion"
[[ "$max_steps" =~ ^-?[0-9]+$ ]] || die "max_steps must be an integer (-1: train for epochs), got '$max_steps'"
[[ "$mode" == "train eval" ]] && mode=train_eval
require_choice mode "$mode" train eval prediction train_eval
require_choice enable_benchmark "$enable_benchmark" true false
require_choice fuse_mha "$fuse_mha" true false
if [[ -n "${NULL_SCORE_DIFF_THRESHOLD:-}" ]]; then
  [[ "$squad_version" == 2.0 ]] || die "NULL_SCORE_DIFF_THRESHOLD is only used with SQUAD_VERSION=2.0"
  [[ "$NULL_SCORE_DIFF_THRESHOLD" =~ ^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] ||
    die "NULL_SCORE_DIFF_THRESHOLD must be a number, got '$NULL_SCORE_DIFF_THRESHOLD'"
fi

export_onnx=${EXPORT_ONNX:-false}
require_choice EXPORT_ONNX "$export_onnx" true false
[[ "$export_onnx" == false || "$mode" == train || "$mode" == train_eval ]] ||
  die "EXPORT_ONNX exports the model that a mode with train fine-tunes; mode is '$mode'"
inference_mode_error=""
[[ "$mode" == eval || "$mode" == prediction ]] || inference_mode_error="mode must be eval or prediction, got '$mode'"
set_inference_flags "$init_checkpoint" "$inference_mode_error"
weights=(--from-pretrained-params "$init_checkpoint")
(( ${#INFERENCE_FLAGS[@]} == 0 )) || weights=("${INFERENCE_FLAGS[@]}")

set_bert_model "$CONFIG_FILE"
set_precision_flags "$precision" 128.0

# NVIDIA's run_squad.py writes the model and predictions to <output-dir>/<bert-model>/squad/; ours writes to
# --output-dir itself, so the folder is named here.
squad_out_dir="$OUT_DIR/$BERT_MODEL/squad"
flags=("${weights[@]}" --vocab-file "$vocab_file" --output-dir "$squad_out_dir"
  "${BERT_MODEL_FLAGS[@]}" --learning-rate "$learning_rate" --warmup-proportion "$warmup_proportion"
  --seed "$seed" --epochs "$epochs" --max-steps "$max_steps" --max-seq-length 384 --doc-stride 128
  --log-freq 100 --report-file "$OUT_DIR/dllogger_${num_gpus}_${precision}.json" "${PRECISION_FLAGS[@]}")
if [[ "$squad_version" == 2.0 ]]; then
  flags+=(--version-2-with-negative --null-score-diff-threshold "${NULL_SCORE_DIFF_THRESHOLD:-0.0}")
fi
if [[ "$mode" == train || "$mode" == train_eval ]]; then
  flags+=(--do-train --train-file "$squad_dir/train-v$squad_version.json" --train-batch-size "$batch_size")
fi
if [[ "$mode" != train ]]; then
  flags+=(--do-predict --predict-file "$squad_dir/dev-v$squad_version.json" --predict-batch-size "$batch_size")
fi
if [[ "$mode" == eval || "$mode" == train_eval ]]; then
  flags+=(--do-eval)
fi
[[ "$fuse_mha" == true ]] && flags+=(--fuse-mha)
[[ "$export_onnx" == true ]] && flags+=(--export-dir "$squad_out_dir/export" --export-onnx)
[[ "$enable_benchmark" == true ]] && flags+=(--benchmark --benchmark-steps "$benchmark_steps"
  --benchmark-warmup-steps "$benchmark_warmup_steps")

# More than one process: Paddle's launcher, its own output kept in log/launcherlog (run_launcher). One process runs
# without it.
num_gpus=$(process_count "$num_gpus" "${7:-}")
hold_output_folder OUT_DIR "$OUT_DIR" "$squad_out_dir"
if (( num_gpus > 1 )); then
  run_launcher "$OUT_DIR/logfile.txt" log --nproc_per_node "$num_gpus" "$CODEDIR/run_squad.py" "${flags[@]}"
else
  run_logged "$OUT_DIR/logfile.txt" python "$CODEDIR/run_squad.py" "${flags[@]}"
fi
