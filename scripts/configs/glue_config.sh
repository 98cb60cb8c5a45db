# GLUE fine-tuning presets: each function prints the 16 positional arguments of scripts/run_glue.sh.
#
#   bash scripts/run_glue.sh $(source scripts/configs/glue_config.sh && mrpc_dgxa100-80g_8gpu_fp16)
#
# GPU presets, named <task>_<system>_<n>gpu_<precision> for n = 1, 2, 4, 8, carry NVIDIA's BERT-large recipes
# (DeepLearningExamples, PyTorch BERT, scripts/configs/glue_config.sh): MRPC with global batch 128, learning
# rate 1.8e-5, warmup 0.3, 3 epochs; SST-2 with global batch 1024 (512 on DGX-1 in fp32), learning rate 1e-5,
# warmup 0.1, 3 epochs. The per-GPU batch (global / n) is split into micro-batches by doubling the
# accumulation until a micro-batch fits the system: 256 examples (DGX A100 80GB, fp16), 128 (A100 tf32,
# DGX-1 32GB fp16) or 64 (DGX-1 fp32). NVIDIA has no recipes for MNLI, QNLI, STS-B and WNLI: their presets, in
# the same shape, take BERT's own fine-tuning recipe (Devlin et al. 2019, section 4.1: global batch 32, 3 epochs,
# warmup 0.1) with learning rate 2e-5, the lowest of the paper's choices and the one of Hugging Face's GLUE
# examples; mnli scores dev_matched.tsv and dev_mismatched.tsv.
#
# CPU presets, one process each, writing to their own <RESULTS_DIR>/<preset> folder:
# - mrpc_cpu_demo: the cpu_demo pre-training preset's final checkpoint (bert-tiny, its 4096-token vocab) on MRPC,
#   1 epoch at learning rate 2e-4: the route from pretraining to a GLUE score, not a useful score.
# - mrpc_cpu_minilm: all-MiniLM-L6-v2 on MRPC, 2 epochs at learning rate 1e-4 (the real-weights check of the GLUE
#   issue): <repo>/../shared/models/all-MiniLM-L6-v2, a Hugging Face folder, given as it is (run_glue.py converts
#   it in memory, its config.json the model's config).
#
# Paths come from BERT_PREP_WORKING_DIR (data; default <repo>/data), RESULTS_DIR (CPU presets; default
# <repo>/results), GLUE_DIR (default <repo>/../shared/data/glue, CPU presets) and the location of this file (code).
# shellcheck shell=bash

_GLUE_CONFIG_CODEDIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Print the arguments in run_glue.sh's order from the variables a preset sets.
_print_glue_args() {
  echo "$init_checkpoint" "$data_dir" "$vocab_file" "$config_file" "$out_dir" "$task_name" "$num_gpu" \
    "$batch_size" "$gradient_accumulation_steps" "$learning_rate" "$warmup_proportion" "$epochs" "$max_steps" \
    "$precision" "$seed" "$mode"
}

_glue_gpu_recipe() {  # task system_precision num_gpu
  local task="$1" capacity
  init_checkpoint="$_GLUE_CONFIG_CODEDIR/results/bert-large-uncased/phase2/1563"
  vocab_file="$_GLUE_CONFIG_CODEDIR/vocab/bert-large-uncased-vocab.txt"
  config_file="$_GLUE_CONFIG_CODEDIR/bert_configs/bert-large-uncased.json"
  max_steps=-1.0
  seed=2
  mode=train,eval
  local folder="${task^^}" global_batch_size
  epochs=3
  case "$task" in
    mrpc) global_batch_size=128 learning_rate=1.8e-5 warmup_proportion=0.3 ;;
    sst-2) global_batch_size=1024 learning_rate=1e-5 warmup_proportion=0.1 ;;
    *) global_batch_size=32 learning_rate=2e-5 warmup_proportion=0.1 ;;
  esac
  case "$2" in
    dgxa100-80g_fp16) capacity=256 precision=fp16 ;;
    dgxa100-80g_tf32) capacity=128 precision=tf32 ;;
    dgx1-32g_fp16) capacity=128 precision=fp16 ;;
    dgx1-32g_fp32) capacity=64 precision=fp32 ;;
  esac
  if [[ "$task" == sst-2 && "$2" == dgx1-32g_fp32 ]]; then
    global_batch_size=512
  fi
  data_dir="${BERT_PREP_WORKING_DIR:-$_GLUE_CONFIG_CODEDIR/data}/download/glue/$folder"
  out_dir="$_GLUE_CONFIG_CODEDIR/results/$folder"
  task_name="$task"
  num_gpu="$3"
  batch_size=$((global_batch_size / num_gpu))
  gradient_accumulation_steps=1
  while (( batch_size / gradient_accumulation_steps > capacity )); do
    gradient_accumulation_steps=$((gradient_accumulation_steps * 2))
  done
  _print_glue_args
}

for _glue_task in mrpc sst-2 mnli qnli sts-b wnli; do
  for _glue_system in dgxa100-80g_fp16 dgxa100-80g_tf32 dgx1-32g_fp16 dgx1-32g_fp32; do
    for _glue_gpus in 1 2 4 8; do
      eval "${_glue_task}_${_glue_system%_*}_${_glue_gpus}gpu_${_glue_system##*_}() (
        _glue_gpu_recipe $_glue_task $_glue_system $_glue_gpus
      )"
    done
  done
done
unset _glue_task _glue_system _glue_gpus

# The CPU presets' shared values; $1 names the preset and its results folder.
_glue_cpu_recipe() {
  results="${RESULTS_DIR:-$_GLUE_CONFIG_CODEDIR/results}"
  data_dir="${GLUE_DIR:-$(cd "$_GLUE_CONFIG_CODEDIR/.." && pwd)/shared/data/glue}/MRPC"
  out_dir="$results/$1"
  task_name=mrpc
  num_gpu=1
  batch_size=32
  gradient_accumulation_steps=1
  warmup_proportion=0.1
  max_steps=-1
  precision=fp32
  seed=42
  mode=train,eval,prediction
}

mrpc_cpu_demo() (
  local results
  _glue_cpu_recipe mrpc_cpu_demo
  init_checkpoint="$results/cpu_demo/custom/phase1/400"
  vocab_file="${BERT_PREP_WORKING_DIR:-$_GLUE_CONFIG_CODEDIR/data}/sample/vocab.txt"
  config_file="$_GLUE_CONFIG_CODEDIR/bert_configs/bert-tiny-4k-vocab.json"  # what cpu_demo trained
  learning_rate=2e-4
  epochs=1
  # Messages go to stderr: stdout is the argument list.
  [[ -d "$init_checkpoint" ]] ||
    echo "mrpc_cpu_demo: $init_checkpoint: not there yet; run the cpu_demo pre-training preset first" >&2
  _print_glue_args
)

mrpc_cpu_minilm() (
  local results
  _glue_cpu_recipe mrpc_cpu_minilm
  local minilm
  minilm="$(cd "$_GLUE_CONFIG_CODEDIR/.." && pwd)/shared/models/all-MiniLM-L6-v2"
  init_checkpoint="$minilm"
  vocab_file="$minilm/vocab.txt"
  config_file="$minilm/config.json"
  learning_rate=1e-4
  epochs=2
  _print_glue_args
)
