#!/usr/bin/env bash
# Fine-tune BERT on a GLUE task and/or evaluate it (run_glue.py), with the positional interface of NVIDIA's
# PyTorch scripts/run_glue.sh: the same 16 arguments in the same order with the same defaults.
#
#   bash scripts/run_glue.sh CHECKPOINT ../shared/data/glue/MRPC vocab/bert-large-uncased-vocab.txt None results/MRPC \
#     mrpc 1 32 1 5e-5 0.1 3 -1 fp32 42 "train eval"
#
# Positional arguments (default):
#    1 init_checkpoint (<code_dir>/results/bert-large-uncased/phase2/1563)  initial weights: a folder holding
#                                       bert_paddle.pdparams (the last phase-2 checkpoint of run_pretraining.sh),
#                                       a .pdparams file, a Hugging Face BERT folder as it is, or None (train
#                                       from random weights; a mode without train refuses None, since it would
#                                       score random weights)
#    2 data_dir ($BERT_PREP_WORKING_DIR/download/glue/MRPC/)  holds train.tsv and dev.tsv (MNLI: dev_matched.tsv and
#                                       dev_mismatched.tsv; the diagnostic set, task ax: diagnostic.tsv)
#    3 vocab_file (<code_dir>/vocab/bert-large-uncased-vocab.txt)
#    4 config_file (None)               model config JSON; None: bert-large-uncased
#    5 out_dir (<code_dir>/results/MRPC)  fine-tuned model, predictions.tsv, report.json, logfile
#    6 task_name (mrpc)                 cola | sst-2 | mrpc | rte | qqp | mnli | mnli-mm | qnli | sts-b | wnli | ax;
#                                       mnli scores dev_matched.tsv and dev_mismatched.tsv (metrics ending in _mm),
#                                       mnli-mm only the mismatched one; ax predicts diagnostic.tsv with an MNLI
#                                       model (init_checkpoint) in mode prediction, and nothing else
#    7 num_gpu (8; 1 without a GPU)     processes; an evaluation without training uses 1
#    8 batch_size (16)                  examples per process per optimizer step, as in NVIDIA's run_glue.py, which
#                                       splits them into micro-batches of batch_size / gradient_accumulation_steps;
#                                       prediction batches hold batch_size examples
#    9 gradient_accumulation_steps (1)  micro-batches per optimizer step; must divide batch_size
#   10 learning_rate (2.4e-5)           peak learning rate (linear warmup, then linear decay to 0)
#   11 warmup_proportion (0.1)
#   12 epochs (3)
#   13 max_steps (-1.0)                 optimizer steps instead of epochs; negative: not set
#   14 precision (fp16)                 fp32 | tf32 | amp | fp16 | bf16 (see scripts/common.sh); on CPU all fp32
#   15 seed (2)
#   16 mode ("train eval")              any of train, eval (score dev.tsv) and prediction (write predictions.tsv),
#                                       separated by spaces or commas
# Environment: BERT_PREP_WORKING_DIR (default <code_dir>/data), and some that NVIDIA's script lacks (it predicts in
# dygraph only), so that its 16 positions stay as they are:
#   EXPORT_ONNX (false)                 true: a mode with train also exports the fine-tuned model to <out_dir>/export
#                                       for Paddle Inference and ONNX Runtime (--export-dir, --export-onnx)
#   PACK_SEQUENCES (false)              true: a mode with train trains on packed rows, each batch's examples side by
#                                       side (--pack-sequences; the same function of each example on less padding)
#   INFERENCE_BACKEND (unset)           auto | paddle | onnxruntime | openvino: a mode without train predicts with
#                                       the model exported there, init_checkpoint naming its folder
#                                       (--inference-model-dir, --inference-backend; auto: the fastest measured on
#                                       this kind of CPU)
#   INFERENCE_PRECISION (fp32)          with INFERENCE_BACKEND: fp32 | bf16 | fp16 | int8 (--inference-precision;
#                                       docs/inference.md says what runs where)
#   INT8_QUANTIZATION (unset)           with INFERENCE_BACKEND=onnxruntime and INFERENCE_PRECISION=int8: dynamic |
#                                       static | dynamic-per-channel | static-per-channel |
#                                       dynamic-per-channel-outliers (--int8-quantization; static and -outliers
#                                       read the calibration inputs EXPORT_ONNX saved); unset: run_glue.py's
#                                       default for GLUE
#   PREDICT_SPLIT (dev)                 dev | test: the files that eval and prediction read; test (test.tsv, MNLI's
#                                       test_matched.tsv and test_mismatched.tsv), which has no labels, for mode
#                                       prediction alone: it also writes GLUE's leaderboard files into out_dir
#                                       (CoLA.tsv, ...), which `python run_glue.py --gather-submission DIR ZIP` zips
# Presets print all 16 arguments (scripts/configs/glue_config.sh):
#
#   bash scripts/run_glue.sh $(source scripts/configs/glue_config.sh && mrpc_dgxa100-80g_8gpu_fp16)
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_at_most_args 16 "$@"
set_recipe_dirs

init_checkpoint=${1:-$CODEDIR/results/bert-large-uncased/phase2/1563}
data_dir=${2:-$BERT_PREP_WORKING_DIR/download/glue/MRPC/}
vocab_file=${3:-$CODEDIR/vocab/bert-large-uncased-vocab.txt}
config_file=${4:-None}
out_dir=${5:-$CODEDIR/results/MRPC}
task_name=${6:-mrpc}
num_gpu=${7:-8}
batch_size=${8:-16}
gradient_accumulation_steps=${9:-1}
learning_rate=${10:-2.4e-5}
warmup_proportion=${11:-0.1}
epochs=${12:-3}
max_steps=${13:--1.0}
precision=${14:-fp16}
seed=${15:-2}
mode=${16:-train eval}

require_choice task_name "$task_name" cola sst-2 mrpc rte qqp mnli mnli-mm qnli sts-b wnli ax
for name in num_gpu batch_size gradient_accumulation_steps epochs; do
  require_int "$name" "${!name}" 1
done
require_int seed "$seed" 0
require_learning_rate learning_rate "$learning_rate"
require_warmup_proportion warmup_proportion "$warmup_proportion"
(( batch_size % gradient_accumulation_steps == 0 )) \
  || die "gradient_accumulation_steps $gradient_accumulation_steps must divide batch_size $batch_size"
IFS=", " read -ra mode_words <<< "$mode"
(( ${#mode_words[@]} > 0 )) || die "mode must name train, eval and/or prediction, got '$mode'"
for word in "${mode_words[@]}"; do
  require_choice mode "$word" train eval prediction
done
# run_glue.py refuses too (without --allow-random-weights, which this script never passes); refusing here says it
# in the script's own terms, before anything starts.
if [[ "$mode" != *train* && "$init_checkpoint" == None ]]; then
  die "mode '$mode' scores the weights of init_checkpoint, which is None (random weights); name the fine-tuned model"
fi
predict_split=${PREDICT_SPLIT:-dev}
require_choice PREDICT_SPLIT "$predict_split" dev test
predicts_only=false
[[ "$mode" == *train* || "$mode" == *eval* ]] || predicts_only=true
[[ "$predict_split" == dev || "$predicts_only" == true ]] ||
  die "PREDICT_SPLIT=test: GLUE's test files have no labels to train or score; mode must be prediction, got '$mode'"
[[ "$task_name" != ax || "$predicts_only" == true ]] ||
  die "task_name ax predicts GLUE's diagnostic set (no labels) with an MNLI model; mode must be prediction, got '$mode'"
case "$task_name" in
  mnli) predict_files=("${predict_split}_matched.tsv" "${predict_split}_mismatched.tsv") ;;
  mnli-mm) predict_files=("${predict_split}_mismatched.tsv") ;;
  ax) predict_files=(diagnostic.tsv) ;;
  *) predict_files=("$predict_split.tsv") ;;
esac
export_onnx=${EXPORT_ONNX:-false}
require_choice EXPORT_ONNX "$export_onnx" true false
[[ "$export_onnx" == false || "$mode" == *train* ]] ||
  die "EXPORT_ONNX exports the model that a mode with train fine-tunes; mode is '$mode'"
pack_sequences=${PACK_SEQUENCES:-false}
require_choice PACK_SEQUENCES "$pack_sequences" true false
[[ "$pack_sequences" == false || "$mode" == *train* ]] ||
  die "PACK_SEQUENCES packs the training batches of a mode with train; mode is '$mode'"
inference_mode_error=""
[[ "$mode" != *train* ]] || inference_mode_error="mode must not train, got '$mode'"
set_inference_flags "$init_checkpoint" "$inference_mode_error"
weights=()
[[ "$init_checkpoint" != None ]] && weights=(--from-pretrained-params "$init_checkpoint")
(( ${#INFERENCE_FLAGS[@]} == 0 )) || weights=("${INFERENCE_FLAGS[@]}")
data_dir=${data_dir%/}
set_bert_model "$config_file"
set_precision_flags "$precision" 128  # the initial loss scale of NVIDIA's Paddle run_squad.sh

flags=(--task-name "$task_name" --vocab-file "$vocab_file" "${BERT_MODEL_FLAGS[@]}" --output-dir "$out_dir"
  --max-seq-length 128 --seed "$seed" "${PRECISION_FLAGS[@]}")
flags+=("${weights[@]}")
if [[ "$mode" == *train* ]]; then
  flags+=(--do-train --train-file "$data_dir/train.tsv" --train-batch-size $((batch_size / gradient_accumulation_steps))
    --gradient-merge-steps "$gradient_accumulation_steps" --learning-rate "$learning_rate"
    --warmup-proportion "$warmup_proportion" --epochs "$epochs")
  # NVIDIA passes -1.0 for "not set"
  if [[ "$max_steps" != -* ]]; then
    require_int max_steps "$max_steps" 1
    flags+=(--max-steps "$max_steps")
  fi
else
  num_gpu=1
fi
[[ "$mode" == *eval* ]] && flags+=(--do-eval)
[[ "$mode" == *prediction* ]] && flags+=(--do-predict)
if [[ "$mode" =~ (eval|prediction) ]]; then
  flags+=(--predict-file "$data_dir/${predict_files[0]}" --predict-batch-size "$batch_size")
  (( ${#predict_files[@]} == 1 )) || flags+=(--mismatched-predict-file "$data_dir/${predict_files[1]}")
fi
[[ "$export_onnx" == true ]] && flags+=(--export-dir "$out_dir/export" --export-onnx)
[[ "$pack_sequences" == true ]] && flags+=(--pack-sequences)

# More than one process: Paddle's launcher, its own output kept in <out_dir>/log/launcherlog (run_launcher).
num_gpu=$(process_count "$num_gpu" "${7:-}")
hold_output_folder out_dir "$out_dir"
if (( num_gpu > 1 )); then
  run_launcher "$out_dir/logfile" "$out_dir/log" --nproc_per_node "$num_gpu" "$CODEDIR/run_glue.py" "${flags[@]}"
else
  run_logged "$out_dir/logfile" python "$CODEDIR/run_glue.py" "${flags[@]}"
fi
