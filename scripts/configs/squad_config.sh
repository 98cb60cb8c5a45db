# SQuAD presets: each function prints the positional arguments of scripts/run_squad.sh.
#
#   bash scripts/run_squad.sh $(source scripts/configs/squad_config.sh && dgxa100-80g_8gpu_amp)
#   export SQUAD_VERSION=2.0   # then the same: squad_dir is download/squad/v2.0, and run_squad.sh runs v2.0
#
# The dgxa100 8-GPU values are NVIDIA's (DeepLearningExamples, PaddlePaddle BERT, scripts/configs/
# squad_config.sh; its tf32 preset said amp, here it is tf32). The 1-GPU presets keep the per-GPU batch of 32,
# so their global batch is 32 instead of 256; the H100 presets take the A100 80GB values.
# cpu_tiny fine-tunes the phase-2 checkpoint of the cpu_tiny pre-training preset for a few steps.
# squad_cpu_demo [DEV_FILE] fine-tunes the cpu_demo pre-training preset's checkpoint offline, on one CPU process:
# there is no SQuAD training set here, so it trains on a slice of the dev set and predicts another (below).
#
# Paths come from BERT_PREP_WORKING_DIR (data; default <repo>/data), RESULTS_DIR (checkpoints; default
# <repo>/results) and the location of this file (code).
# shellcheck shell=bash

_SQUAD_CONFIG_CODEDIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

_print_squad_args() {
  echo "$init_checkpoint" "$epochs" "$batch_size" "$learning_rate" "$warmup_proportion" \
    "$precision" "$num_gpus" "$seed" "$squad_dir" "$vocab_file" "$OUT_DIR" "$mode" "$CONFIG_FILE" \
    "$max_steps" "$enable_benchmark" "$benchmark_steps" "$benchmark_warmup_steps" "$fuse_mha"
}

# NVIDIA's dgxa100-80g_8gpu_amp: BERT-large from the end of phase 2, 8 GPUs, float16 AMP.
_bert_large_squad() {
  local prep="${BERT_PREP_WORKING_DIR:-$_SQUAD_CONFIG_CODEDIR/data}"
  local results="${RESULTS_DIR:-$_SQUAD_CONFIG_CODEDIR/results}"
  init_checkpoint="$results/bert-large-uncased/phase2/1563"
  epochs=2
  batch_size=32
  learning_rate=4.6e-5
  warmup_proportion=0.2
  precision=amp
  num_gpus=8
  seed=1
  squad_dir="$prep/download/squad/v${SQUAD_VERSION:-1.1}"
  vocab_file="$_SQUAD_CONFIG_CODEDIR/vocab/bert-large-uncased-vocab.txt"
  OUT_DIR="$results/squad"
  mode=train_eval
  CONFIG_FILE="$_SQUAD_CONFIG_CODEDIR/bert_configs/bert-large-uncased.json"
  max_steps=-1
  enable_benchmark=false
  benchmark_steps=100
  benchmark_warmup_steps=100
  fuse_mha=true
}

dgxa100-80g_8gpu_amp() (
  _bert_large_squad
  _print_squad_args
)

dgxa100-80g_8gpu_tf32() (
  _bert_large_squad
  precision=tf32
  _print_squad_args
)

dgxa100-80g_1gpu_amp() (
  _bert_large_squad
  num_gpus=1
  _print_squad_args
)

dgxa100-80g_1gpu_tf32() (
  _bert_large_squad
  precision=tf32
  num_gpus=1
  _print_squad_args
)

dgxh100-80g_8gpu_amp() (
  _bert_large_squad
  _print_squad_args
)

dgxh100-80g_8gpu_bf16() (
  _bert_large_squad
  precision=bf16
  _print_squad_args
)

# bert-tiny from the cpu_tiny pre-training preset's last phase-2 step (in its own results folder), 4 steps on one CPU process.
cpu_tiny() (
  _bert_large_squad
  local prep="${BERT_PREP_WORKING_DIR:-$_SQUAD_CONFIG_CODEDIR/data}"
  local results="${RESULTS_DIR:-$_SQUAD_CONFIG_CODEDIR/results}"
  init_checkpoint="$results/cpu_tiny/custom/phase2/4"
  epochs=1
  batch_size=8
  learning_rate=1e-4
  precision=fp32
  num_gpus=1
  vocab_file="$prep/sample/vocab.txt"
  OUT_DIR="$results/squad"
  CONFIG_FILE="$_SQUAD_CONFIG_CODEDIR/bert_configs/bert-tiny-uncased.json"
  max_steps=4
  benchmark_steps=2
  benchmark_warmup_steps=2
  _print_squad_args
)

# squad_cpu_demo [DEV_FILE]: the cpu_demo pre-training preset's final checkpoint (bert-tiny, 4096-token vocab) on
# SQuAD v1.1 without its training set. DEV_FILE (default ../shared/data/squad/v1.1/dev-v1.1.json beside the
# repository) is cut by article into two files under <RESULTS_DIR>/squad_cpu_demo/data: train-v1.1.json holds
# every article but the last, dev-v1.1.json the last one (206 questions in v1.1's dev set), so the predictions
# are scored on questions about a text the model was not trained on. 60 steps of 16 features train on part of the
# first file: enough to show the route from pretraining to a SQuAD score, not to reach a useful one. The two files
# are written once (atomically); delete the data folder to cut another DEV_FILE.
squad_cpu_demo() (
  _bert_large_squad
  local results="${RESULTS_DIR:-$_SQUAD_CONFIG_CODEDIR/results}"
  local dev_file="${1:-$(cd "$_SQUAD_CONFIG_CODEDIR/.." && pwd)/shared/data/squad/v1.1/dev-v1.1.json}"
  init_checkpoint="$results/cpu_demo/custom/phase1/400"
  [[ -d "$init_checkpoint" ]] ||
    echo "squad_cpu_demo: $init_checkpoint: not there yet; run the cpu_demo pre-training preset first" >&2
  epochs=1
  batch_size=16
  learning_rate=5e-4
  warmup_proportion=0.1
  precision=fp32
  num_gpus=1
  squad_dir="$results/squad_cpu_demo/data"
  vocab_file="${BERT_PREP_WORKING_DIR:-$_SQUAD_CONFIG_CODEDIR/data}/sample/vocab.txt"
  OUT_DIR="$results/squad_cpu_demo"
  CONFIG_FILE="$_SQUAD_CONFIG_CODEDIR/bert_configs/bert-tiny-4k-vocab.json"  # what cpu_demo trained
  max_steps=60
  # Messages go to stderr: stdout is the argument list.
  [[ -f "$squad_dir/dev-v1.1.json" ]] || python - "$dev_file" "$squad_dir" >&2 <<'PYTHON'
import json, os, sys
source, folder = sys.argv[1], sys.argv[2]
try:
    with open(source, encoding="utf-8") as f:
        articles = json.load(f)["data"]
    questions = [sum(len(paragraph["qas"]) for article in part for paragraph in article["paragraphs"])
                 for part in (articles[:-1], articles[-1:])]
except (OSError, ValueError, KeyError, TypeError) as error:
    sys.exit(f"squad_cpu_demo: {source}: not a readable SQuAD v1.1 file ({error}); give the dev set: "
             "squad_cpu_demo DEV_FILE")
os.makedirs(folder, exist_ok=True)
for name, part in (("train-v1.1.json", articles[:-1]), ("dev-v1.1.json", articles[-1:])):
    with open(os.path.join(folder, name + ".part"), "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": part}, f)
    os.replace(os.path.join(folder, name + ".part"), os.path.join(folder, name))
print(f"squad_cpu_demo: {source} cut into {folder}/train-v1.1.json ({len(articles) - 1} articles, {questions[0]} "
      f"questions) and dev-v1.1.json (the last article, {questions[1]} questions)")
PYTHON
  _print_squad_args
)
