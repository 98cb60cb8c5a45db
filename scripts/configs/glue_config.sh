# GLUE fine-tuning presets: each function prints the 16 positional arguments of scripts/run_glue.sh.
#
#   bash scripts/run_glue.sh $(source scripts/configs/glue_config.sh && mrpc_dgxa100-80g_8gpu_fp16)
#
# GPU presets, named <task>_<system>_<n>gpu_<precision> for n = 1, 2, 4, 8, carry NVIDIA's BERT-large recipes
# (DeepLearningExamples, PyTorch BERT, scripts/configs/glue_config.sh): MRPC with global batch 128, learning
# rate 1.8e-5, warmup 0.3, 3 epochs; SST-2 with global batch 1024 (512 on DGX-1 in fp32), learning rate 1e-5,
# warmup 0.1, 3 epochs. The per-GPU batch (global / n) is split into micro-batches by doubling the
# accumulation until a micro-batch fits the system: 256 examples (DGX A100 80GB, fp16), 128 (A100 tf32,
# DGX-1 32GB fp16) or 64 (DGX-1 fp32).
#
# CPU preset mrpc_cpu_minilm: all-MiniLM-L6-v2 on MRPC, 2 epochs at learning rate 1e-4 (the real-weights check
# of the GLUE issue). Convert the model first:
#
#   python convert_checkpoint.py hf2paddle ../shared/models/all-MiniLM-L6-v2 results/minilm/minilm.pdparams \
#     --config-out results/minilm/minilm_config.json
#
# Paths come from BERT_PREP_WORKING_DIR (data; default <repo>/data), GLUE_DIR (default <repo>/../shared/data/glue,
# CPU preset) and the location of this file (code).
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
  local folder=MRPC global_batch_size=128
  learning_rate=1.8e-5
  warmup_proportion=0.3
  epochs=3
  if [[ "$task" == sst-2 ]]; then
    folder=SST-2
    global_batch_size=1024
    learning_rate=1e-5
    warmup_proportion=0.1
  fi
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

for _glue_task in mrpc sst-2; do
  for _glue_system in dgxa100-80g_fp16 dgxa100-80g_tf32 dgx1-32g_fp16 dgx1-32g_fp32; do
    for _glue_gpus in 1 2 4 8; do
      eval "${_glue_task}_${_glue_system%_*}_${_glue_gpus}gpu_${_glue_system##*_}() (
        _glue_gpu_recipe $_glue_task $_glue_system $_glue_gpus
      )"
    done
  done
done
unset _glue_task _glue_system _glue_gpus

mrpc_cpu_minilm() (
  init_checkpoint="$_GLUE_CONFIG_CODEDIR/results/minilm/minilm.pdparams"
  data_dir="${GLUE_DIR:-$_GLUE_CONFIG_CODEDIR/../shared/data/glue}/MRPC"
  vocab_file="$_GLUE_CONFIG_CODEDIR/../shared/models/all-MiniLM-L6-v2/vocab.txt"
  config_file="$_GLUE_CONFIG_CODEDIR/results/minilm/minilm_config.json"
  out_dir="$_GLUE_CONFIG_CODEDIR/results/MRPC-minilm"
  task_name=mrpc
  num_gpu=1
  batch_size=32
  gradient_accumulation_steps=1
  learning_rate=1e-4
  warmup_proportion=0.1
  epochs=2
  max_steps=-1
  precision=fp32
  seed=42
  mode=train,eval,prediction
  _print_glue_args
)
