#!/usr/bin/env bash
# BERT pre-training on one node: phase 1 (sequence length 128), then phase 2 (512) from phase 1's final weights.
# NVIDIA's positional interface: the same 32 arguments in the same order with the same defaults, plus three
# optional ones for LANS, three for validation, four for whole-word masking, the masked fraction, MLM-only
# training and packing (README, "Beyond NVIDIA's recipe"), one for the results folder, two for training to a
# time budget and one for phase 2's share of it, four for the budget-recipe model options and one for a vocabulary
# trained on the corpus. Presets print them:
#
#   bash scripts/run_pretraining.sh $(source scripts/configs/pretrain_config.sh && dgxa100-80g_8gpu_amp)
#   bash scripts/run_pretraining.sh $(source scripts/configs/pretrain_config.sh && cpu_tiny)
#   bash scripts/run_pretraining.sh $(source scripts/configs/pretrain_config.sh && cpu_demo)   # about 3 min
#   bash scripts/run_pretraining.sh $(source scripts/configs/pretrain_config.sh && cpu_tiny_beyond)
#
# What it does:
# - A data folder that is missing or empty is made with lddl_preprocess.py from the corpus (argument 21);
#   the corpus "sample" is built offline by data/make_sample_corpus.py (Python's own documentation).
# - Each phase runs `python -m paddle.distributed.launch --nproc_per_node <num_gpus> run_pretraining.py`
#   with --last-step-of-checkpoint auto, so rerunning the same command continues from the newest checkpoint.
# - Phase 2 starts from <results>/<bert-model>/phase1/<train_steps>, phase 1's final checkpoint (under a time
#   budget, its newest); with train_steps_phase2 0 there is no phase 2.
# - After each phase, plot_report.py draws its report as <results>/dllogger_p<phase>.png and prints one summary
#   line (steps, sequences, time, first and last validation loss and accuracy); the script ends with the path
#   of the final checkpoint.
#
# Positional arguments (default):
#    1 train_batch_size (256)             sequences per GPU per micro-batch, phase 1
#    2 learning_rate (6e-3)               peak learning rate, phase 1
#    3 precision (amp)                    fp32 | tf32 | amp | fp16 | bf16 (see scripts/common.sh)
#    4 num_gpus (8)                       processes (GPUs) on this node
#    5 warmup_proportion (0.2843)         fraction of phase 1 spent in warmup
#    6 train_steps (7038)                 optimizer steps of phase 1
#    7 save_checkpoint_steps (200)        checkpoint interval, both phases
#    8 create_logfile (false)             true: also write each phase's output to <results>/<job_name>.*.log
#    9 gradient_accumulation_steps (32)   micro-batches per optimizer step, phase 1
#   10 seed (12439)                       seed of preprocessing and training
#   11 job_name (bert_lamb_pretraining)   first part of the log file names
#   12 train_batch_size_phase2 (32)
#   13 learning_rate_phase2 (4e-3)
#   14 warmup_proportion_phase2 (0.128)
#   15 train_steps_phase2 (1563)         0: phase 1 only (no phase-2 data is made)
#   16 gradient_accumulation_steps_phase2 (128)
#   17 DATA_DIR_PHASE1 ($BERT_PREP_WORKING_DIR/pretrain/phase1/unbinned/parquet/)
#   18 DATA_DIR_PHASE2 ($BERT_PREP_WORKING_DIR/pretrain/phase2/bin_size_64/parquet/)
#   19 CODEDIR (the folder holding this scripts/ folder; /workspace/bert in the container)
#   20 init_checkpoint (None)             phase 1 resumes from it (NVIDIA's --from-checkpoint <it>
#                                         --last-step-of-checkpoint auto): a folder of <step>/ checkpoints
#   21 wikipedia_source ($BERT_PREP_WORKING_DIR/wikipedia/source/)  corpus to preprocess, or "sample"
#   22 num_dask_workers (nproc)           preprocessing worker processes
#   23 num_shards_per_worker (128)        shards = this x max(num_workers, 1) x num_gpus
#   24 num_workers (4)                    data-loader worker processes per GPU (and the shard count above)
#   25 sample_ratio (0.9)                 fraction of the corpus's documents to use
#   26 phase2_bin_size (64)               none | 32 | 64 | 128 | 256 | 512: phase 2 length bins
#   27 masking (static)                   static (masks in the shards) | dynamic (drawn by the loader)
#   28 BERT_CONFIG (None)                 model config JSON; None: bert-large-uncased
#   29 enable_benchmark (false)           true: time benchmark_steps after benchmark_warmup steps, no checkpoints
#   30 benchmark_steps (10)
#   31 benchmark_warmup_steps (10)
#   32 fuse_mha (true)                    one fused QKV projection per attention layer
#   33 optimizer (Lamb)                   Lamb | Lans | AdamW
#   34 constant_proportion (0)            fraction of phase 1 held at the peak after warmup (LANS schedule)
#   35 constant_proportion_phase2 (0)
#   36 holdout_fraction (0)              > 0: preprocessing holds out this fraction of the documents in
#                                         <data dir>_holdout (lddl_preprocess.py --holdout-fraction) and each
#                                         phase evaluates on it (run_pretraining.py --eval-dir); 0: no validation
#   37 eval_freq (1000)                  evaluate every this many steps and at the last one (--eval-freq)
#   38 num_eval_batches (100)            batches per evaluation (--num-eval-batches)
#   39 whole_word_masking (false)        true: mask whole words (a piece and its ## continuations) where the
#                                         masks are drawn: static, lddl_preprocess.py --whole-word-masking;
#                                         dynamic, run_pretraining.py --whole-word-masking
#   40 masked_lm_ratio (0.15)            fraction of each sequence's tokens masked, in (0, 1), passed to the same
#                                         script as argument 39 (--masked-lm-ratio; MosaicBERT uses 0.3); at most
#                                         ceil(ratio x sequence length) masks per sequence, and at least NVIDIA's
#                                         20 in phase 1 and 80 in phase 2 (0.3: 39 and 154), static or dynamic
#   41 no_nsp (false)                    true: masked LM alone: single-segment shards (lddl_preprocess.py
#                                         --no-nsp) and no NSP head or loss (run_pretraining.py --no-nsp)
#   42 pack_sequences (false)            true: several samples per row of each micro-batch
#                                         (run_pretraining.py --pack-sequences)
#   43 results_dir ($RESULTS_DIR)        checkpoints (<it>/<bert-model>/phase1|2/<step>), reports and logs; the
#                                         CPU presets name their own, <RESULTS_DIR>/<preset>, so that one
#                                         preset's rerun continues and another preset's run starts apart
#   44 time_budget (none)                minutes of training (run_pretraining.py --time-budget): each phase's
#                                         learning-rate schedule spans its part of them and the phase ends at the
#                                         first step that reaches it; train_steps (6) and train_steps_phase2 (15)
#                                         then cap the steps. Phase 1 takes all of them unless argument 53 gives
#                                         phase 2 a share. none: train_steps steps
#   45 eval_interval_minutes (none)      with holdout_fraction > 0: evaluate each time the training time crosses
#                                         a multiple of this many minutes (--eval-interval-minutes), instead of
#                                         every eval_freq (37) steps; none: every eval_freq steps
#   46 pre_layer_norm (false)            true: pre-LayerNorm blocks (run_pretraining.py --pre-layer-norm)
#   47 linear_bias (true)                false: no biases in the encoder's linear layers (--no-linear-bias)
#   48 gated_feed_forward (false)        true: gated-GELU feed-forward (--gated-feed-forward)
#   49 dropout (true)                    false: pretrain without dropout (--no-dropout); fine-tuning keeps the
#                                         config's. 46-48 go into the checkpoints' config, so transformers and NGC
#                                         cannot hold the model (convert_checkpoint.py paddle2hf refuses it)
#   50 trained_vocab_size (none)         N: a WordPiece vocabulary of N entries trained on the corpus (21) by
#                                         tokenizer.py train-vocab, uncased, kept beside the phase-1 data as
#                                         <DATA_DIR_PHASE1>_wordpiece-N.txt, tokenizes both phases; the config (28)
#                                         needs vocab_size >= N (e.g. bert_configs/bert-tiny-8k-vocab.json). none:
#                                         VOCAB_FILE. Checkpoints carry their vocabulary, which fine-tuning checks
#   51 gradient_merge_ramp (0)           phase 1's micro-batches per step grow from 1 to gradient_accumulation_steps
#                                         (9), which must be 2 or more, over this fraction of phase 1
#                                         (--gradient-merge-ramp): a batch that ramps up. 0: the full batch throughout
#   52 alibi (false)                     true: ALiBi's distance bias on the attention scores (--alibi); like 46-48 it
#                                         goes into the checkpoints' config
#   53 phase2_budget_share (0)           with time_budget (44): the fraction of it that phase 2 trains (sequence
#                                         length 512, from phase 1's last checkpoint, validated on phase 1's
#                                         held-out batches so that one curve spans both phases); phase 1 trains
#                                         the rest. 0: phase 1 alone, and train_steps_phase2 must be 0; above 0,
#                                         train_steps_phase2 caps phase 2's steps and must be 1 or more
# A data folder is preprocessed only when it is empty: after changing argument 27, 39, 40 or 41, remove the data
# folders or name new ones (arguments 17 and 18).
# Environment: RESULTS_DIR (default <code_dir>/results) is argument 43's default; VOCAB_FILE
# (default <code_dir>/vocab/bert-large-uncased-vocab.txt, shipped; for the "sample" corpus a
# vocab trained on it); BERT_PREP_WORKING_DIR (default <code_dir>/data; the "sample" corpus and its vocab go to
# its sample/ folder); PREPROCESS_ONLY=true makes the data folders (and vocab) as above and stops before training,
# e.g. to build the shards on a CPU node before a GPU job, or to time preprocessing apart from training.
set -euo pipefail

(( $# <= 53 )) || { echo "${0##*/}: at most 53 positional arguments, got $#" >&2; exit 1; }
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/common.sh
source "$SCRIPT_DIR/common.sh"

train_batch_size=${1:-256}
learning_rate=${2:-6e-3}
precision=${3:-amp}
num_gpus=${4:-8}
warmup_proportion=${5:-0.2843}
train_steps=${6:-7038}
save_checkpoint_steps=${7:-200}
create_logfile=${8:-false}
gradient_accumulation_steps=${9:-32}
seed=${10:-12439}
job_name=${11:-bert_lamb_pretraining}
train_batch_size_phase2=${12:-32}
learning_rate_phase2=${13:-4e-3}
warmup_proportion_phase2=${14:-0.128}
train_steps_phase2=${15:-1563}
gradient_accumulation_steps_phase2=${16:-128}
CODEDIR=${19:-$(dirname "$SCRIPT_DIR")}
BERT_PREP_WORKING_DIR=${BERT_PREP_WORKING_DIR:-$CODEDIR/data}
DATA_DIR_PHASE1=${17:-$BERT_PREP_WORKING_DIR/pretrain/phase1/unbinned/parquet/}
DATA_DIR_PHASE2=${18:-$BERT_PREP_WORKING_DIR/pretrain/phase2/bin_size_64/parquet/}
init_checkpoint=${20:-None}
wikipedia_source=${21:-$BERT_PREP_WORKING_DIR/wikipedia/source/}
num_dask_workers=${22:-$(nproc)}
num_shards_per_worker=${23:-128}
num_workers=${24:-4}
sample_ratio=${25:-0.9}
phase2_bin_size=${26:-64}
masking=${27:-static}
BERT_CONFIG=${28:-None}
enable_benchmark=${29:-false}
benchmark_steps=${30:-10}
benchmark_warmup_steps=${31:-10}
fuse_mha=${32:-true}
optimizer=${33:-Lamb}
constant_proportion=${34:-0}
constant_proportion_phase2=${35:-0}
holdout_fraction=${36:-0}
# Read by name in set_feature_flags (scripts/common.sh), as are 27, 36 and 39-42:
# shellcheck disable=SC2034
eval_freq=${37:-1000}
# shellcheck disable=SC2034
num_eval_batches=${38:-100}
whole_word_masking=${39:-false}
masked_lm_ratio=${40:-0.15}
no_nsp=${41:-false}
pack_sequences=${42:-false}

RESULTS_DIR=${43:-${RESULTS_DIR:-$CODEDIR/results}}
preprocess_only=${PREPROCESS_ONLY:-false}
time_budget=${44:-none}
eval_interval_minutes=${45:-none}
pre_layer_norm=${46:-false}
linear_bias=${47:-true}
gated_feed_forward=${48:-false}
dropout=${49:-true}
trained_vocab_size=${50:-none}
gradient_merge_ramp=${51:-0}
alibi=${52:-false}
phase2_budget_share=${53:-0}
num_nodes=1

for name in train_batch_size num_gpus train_steps save_checkpoint_steps gradient_accumulation_steps \
    train_batch_size_phase2 gradient_accumulation_steps_phase2 num_dask_workers \
    num_shards_per_worker benchmark_steps benchmark_warmup_steps; do
  require_int "$name" "${!name}" 1
done
require_int seed "$seed" 0
require_int train_steps_phase2 "$train_steps_phase2" 0
require_int num_workers "$num_workers" 0
require_choice create_logfile "$create_logfile" true false
require_choice enable_benchmark "$enable_benchmark" true false
require_choice fuse_mha "$fuse_mha" true false
for name in pre_layer_norm linear_bias gated_feed_forward dropout alibi; do
  require_choice "$name" "${!name}" true false
done
[[ "$trained_vocab_size" == none ]] || require_int trained_vocab_size "$trained_vocab_size" 6
require_number gradient_merge_ramp "$gradient_merge_ramp" 'v <= 1' '[0, 1]'
# One test of "does the batch ramp?", read by the check below and by phase 1's flags.
ramp_batch=false
awk -v r="$gradient_merge_ramp" 'BEGIN { exit !(r > 0) }' && ramp_batch=true
[[ $ramp_batch == true ]] && (( gradient_accumulation_steps < 2 )) \
  && die "gradient_merge_ramp $gradient_merge_ramp grows phase 1's batch up to gradient_accumulation_steps, which is" \
    "$gradient_accumulation_steps; give it 2 or more"
require_choice PREPROCESS_ONLY "$preprocess_only" true false
require_choice phase2_bin_size "$phase2_bin_size" none 32 64 128 256 512
require_choice optimizer "$optimizer" Lamb Lans AdamW
require_fraction sample_ratio "$sample_ratio"
# Checked here, not only by run_pretraining.py, which would refuse them after hours of preprocessing.
for name in learning_rate learning_rate_phase2; do
  require_number "$name" "${!name}" 'v > 0' '(0, inf)'
done
for name in warmup_proportion warmup_proportion_phase2; do
  require_number "$name" "${!name}" 'v <= 1' '[0, 1]'
done
# Arguments 27, 36-42 and 45: checked, and each flag routed to the script where it takes effect (scripts/common.sh).
set_feature_flags masking holdout_fraction eval_freq num_eval_batches whole_word_masking masked_lm_ratio no_nsp \
  pack_sequences
set_eval_interval eval_interval_minutes "$eval_interval_minutes"
require_number phase2_budget_share "$phase2_budget_share" 'v < 1' '[0, 1)'
# One test of "does phase 2 take a share of the budget?", read by the checks below and by phase 2's flags.
phase2_in_budget=false
awk -v s="$phase2_budget_share" 'BEGIN { exit !(s > 0) }' && phase2_in_budget=true
budget_flags=()
budget_flags_phase2=()
if [[ "$time_budget" != none ]]; then
  require_number time_budget "$time_budget" 'v > 0' '(0, inf) or none'
  [[ "$enable_benchmark" == false ]] || die "time_budget $time_budget: a benchmark times a number of steps; set" \
    "enable_benchmark to false or time_budget to none"
  # A phase 2 counted in steps after a budget would make the run's length a guess, so it takes a share of the
  # budget or does not run.
  if [[ $phase2_in_budget == true ]]; then
    (( train_steps_phase2 > 0 )) || die "phase2_budget_share $phase2_budget_share gives phase 2 part of the time" \
      "budget; train_steps_phase2 caps its steps and must be 1 or more"
    budget_flags=(--time-budget "$(awk -v t="$time_budget" -v s="$phase2_budget_share" 'BEGIN { print t * (1 - s) }')")
    budget_flags_phase2=(--time-budget "$(awk -v t="$time_budget" -v s="$phase2_budget_share" 'BEGIN { print t * s }')")
  else
    (( train_steps_phase2 == 0 )) || die "time_budget $time_budget goes to phase 1 alone unless phase2_budget_share" \
      "gives phase 2 a share; set train_steps_phase2 to 0 or phase2_budget_share above 0"
    budget_flags=(--time-budget "$time_budget")
  fi
elif [[ $phase2_in_budget == true ]]; then
  die "phase2_budget_share $phase2_budget_share is a share of time_budget, which is none"
fi
[[ -f "$CODEDIR/run_pretraining.py" ]] || die "code dir $CODEDIR: no run_pretraining.py there"
set_precision_flags "$precision" 1048576
set_bert_model "$BERT_CONFIG"
# One run per results folder, locked before any work (common.sh): Paddle's launcher truncates the ranks' logs in it.
# A preprocessing-only run writes nothing there.
if [[ "$preprocess_only" == true ]]; then
  mkdir -p "$RESULTS_DIR"
else
  hold_output_folder results_dir "$RESULTS_DIR"
fi

# ------------------------------------------------------------------------------------------------
# Data: corpus and vocab, then the LDDL parquet shards of each phase if its folder is empty.
# ------------------------------------------------------------------------------------------------
sample_dir="$BERT_PREP_WORKING_DIR/sample"
sample_corpus=false
if [[ "$wikipedia_source" == sample ]]; then
  sample_corpus=true
  wikipedia_source="$sample_dir/source"
  if folder_is_empty "$wikipedia_source"; then
    run_logged "" python "$CODEDIR/data/make_sample_corpus.py" --output-dir "$wikipedia_source"
  fi
fi
if [[ "$trained_vocab_size" != none ]]; then
  [[ -z "${VOCAB_FILE:-}" ]] || die "trained_vocab_size $trained_vocab_size and VOCAB_FILE $VOCAB_FILE: choose one"
  VOCAB_FILE="${DATA_DIR_PHASE1%/}_wordpiece-$trained_vocab_size.txt"
  if [[ ! -f "$VOCAB_FILE" ]]; then
    folder_is_empty "$wikipedia_source" && die "corpus $wikipedia_source: missing or empty, cannot train a vocabulary"
    mkdir -p "$(dirname "$VOCAB_FILE")"
    run_logged "" python "$CODEDIR/tokenizer.py" train-vocab --input "$wikipedia_source" \
      --vocab-size "$trained_vocab_size" --output "$VOCAB_FILE"
  fi
elif [[ "$sample_corpus" == true ]]; then
  VOCAB_FILE=${VOCAB_FILE:-$sample_dir/vocab.txt}
  if [[ ! -f "$VOCAB_FILE" ]]; then
    # A small vocab suits a corpus of 0.1M words; the model config keeps its own (larger) vocab_size.
    run_logged "" python "$CODEDIR/tokenizer.py" train-vocab --input "$wikipedia_source/en/pydoc_topics.txt" \
      --vocab-size 4096 --output "$VOCAB_FILE"
  fi
fi
VOCAB_FILE=${VOCAB_FILE:-$CODEDIR/vocab/bert-large-uncased-vocab.txt}
[[ -f "$VOCAB_FILE" ]] || die "vocab file $VOCAB_FILE: not found"

readonly num_blocks=$((num_shards_per_worker * (num_workers > 0 ? num_workers : 1) * num_nodes * num_gpus))
sample_ratio_flags=()
# --sample-ratio 1 keeps every document, which lddl_preprocess.py does without the flag.
awk -v r="$sample_ratio" 'BEGIN { exit !(r == 1) }' || sample_ratio_flags=(--sample-ratio "$sample_ratio")

# Each phase's data is made for the sequence length and mask cap it trains with (scripts/common.sh). Static masks
# are drawn with the phase's cap (Google's create_pretraining_data rule), so that shards at any masked_lm_ratio train.

preprocess() {  # data_dir max_seq_length max_predictions_per_seq [extra lddl_preprocess.py flags]
  local data_dir="$1" max_seq_length="$2" mask_cap_flags=()
  [[ "$masking" == static ]] && mask_cap_flags=(--max-predictions-per-seq "$3")
  shift 3
  set_holdout_flags "$data_dir"
  folder_is_empty "$data_dir" || return 0
  echo "$data_dir is empty: preprocessing $wikipedia_source"
  folder_is_empty "$wikipedia_source" && die "corpus $wikipedia_source: missing or empty, cannot preprocess"
  run_logged "" python "$CODEDIR/lddl_preprocess.py" --input "$wikipedia_source" --vocab-file "$VOCAB_FILE" \
    --output-dir "$data_dir" --max-seq-length "$max_seq_length" --num-blocks "$num_blocks" \
    --num-shards "$num_blocks" --num-workers "$num_dask_workers" --seed "$seed" "${PREPROCESS_FEATURE_FLAGS[@]}" \
    "${mask_cap_flags[@]}" "${sample_ratio_flags[@]}" "${HOLDOUT_FLAGS[@]}" "$@"
}

preprocess "$DATA_DIR_PHASE1" "${PHASE_SEQ_LENGTH[1]}" "${PHASE_MAX_PREDICTIONS[1]}"
phase2_bin_flags=()
[[ "$phase2_bin_size" != none ]] && phase2_bin_flags=(--bin-size "$phase2_bin_size")
(( train_steps_phase2 > 0 )) && preprocess "$DATA_DIR_PHASE2" "${PHASE_SEQ_LENGTH[2]}" "${PHASE_MAX_PREDICTIONS[2]}" \
  "${phase2_bin_flags[@]}"
if [[ "$preprocess_only" == true ]]; then
  echo "Data ready (PREPROCESS_ONLY=true, no training): $DATA_DIR_PHASE1$( (( train_steps_phase2 > 0 )) && echo " $DATA_DIR_PHASE2")"
  exit 0
fi

# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------
common_flags=(--vocab-file "$VOCAB_FILE" --output-dir "$RESULTS_DIR" "${BERT_MODEL_FLAGS[@]}"
  --num-steps-per-checkpoint "$save_checkpoint_steps" --seed "$seed" --log-freq 1 --optimizer "$optimizer"
  --num-workers "$num_workers" --last-step-of-checkpoint auto "${PRECISION_FLAGS[@]}")
[[ "$fuse_mha" == true ]] && common_flags+=(--fuse-mha)
[[ "$pre_layer_norm" == true ]] && common_flags+=(--pre-layer-norm)
[[ "$linear_bias" == false ]] && common_flags+=(--no-linear-bias)
[[ "$gated_feed_forward" == true ]] && common_flags+=(--gated-feed-forward)
[[ "$dropout" == false ]] && common_flags+=(--no-dropout)
[[ "$alibi" == true ]] && common_flags+=(--alibi)
common_flags+=("${TRAIN_FEATURE_FLAGS[@]}")
[[ "$enable_benchmark" == true ]] && common_flags+=(--benchmark --benchmark-steps "$benchmark_steps"
  --benchmark-warmup-steps "$benchmark_warmup_steps")

newest_step() {  # phase_folder: the highest step among its <step>/ checkpoint folders
  local path step newest=0
  for path in "$1"/*/; do
    step=$(basename "$path")
    if [[ "$step" =~ ^[0-9]+$ ]] && (( 10#$step > newest )); then
      newest=$((10#$step))
    fi
  done
  (( newest > 0 )) || die "$1: no checkpoint"
  echo "$newest"
}

# The phase's report as a PNG beside it, and its summary line (plot_report.py prints both paths and the line).
plot() {  # phase
  run_logged "" python "$CODEDIR/plot_report.py" "$RESULTS_DIR/dllogger_p$1.json" \
    --output "$RESULTS_DIR/dllogger_p$1.png"
}

launch() {  # phase batch_size accumulation -- run_pretraining.py flags
  local phase="$1" log_file=""
  if [[ "$create_logfile" == true ]]; then
    local global_batch=$(($2 * num_gpus * $3))
    log_file="$RESULTS_DIR/$job_name.paddle_bert_pretraining_phase${phase}_${precision}_gbs${global_batch}"
    log_file+=".$(date +%y%m%d%H%M%S).log"
  fi
  shift 4
  run_launcher "$log_file" "$RESULTS_DIR/log/phase$phase" --nproc_per_node "$num_gpus" \
    "$CODEDIR/run_pretraining.py" "${common_flags[@]}" "$@"
}

set_eval_flags "$DATA_DIR_PHASE1"
phase1_flags=(--phase1 --input-dir "$DATA_DIR_PHASE1" --batch-size "$train_batch_size"
  --max-seq-length "${PHASE_SEQ_LENGTH[1]}" --max-predictions-per-seq "${PHASE_MAX_PREDICTIONS[1]}"
  --max-steps "$train_steps"
  --warmup-proportion "$warmup_proportion" --constant-proportion "$constant_proportion" --learning-rate "$learning_rate"
  --gradient-merge-steps "$gradient_accumulation_steps" --report-file "$RESULTS_DIR/dllogger_p1.json"
  "${EVAL_FLAGS[@]}" "${budget_flags[@]}")
[[ $ramp_batch == true ]] && phase1_flags+=(--gradient-merge-ramp "$gradient_merge_ramp")
# common_flags holds --last-step-of-checkpoint auto, so this is NVIDIA's resume: the newest step folder in it.
[[ "$init_checkpoint" != None ]] && phase1_flags+=(--from-checkpoint "$init_checkpoint")
launch 1 "$train_batch_size" "$gradient_accumulation_steps" -- "${phase1_flags[@]}"
echo "finished phase 1"
plot 1
final_step() {  # phase steps: the phase's last checkpoint; under a time budget the step that spent it, its newest
  if [[ "$time_budget" == none ]]; then echo "$2"; else newest_step "$RESULTS_DIR/$BERT_MODEL/phase$1"; fi
}

if (( train_steps_phase2 == 0 )); then
  [[ "$enable_benchmark" == true ]] || echo "Final checkpoint: $RESULTS_DIR/$BERT_MODEL/phase1/$(final_step 1 "$train_steps")"
  exit 0
fi

# Under a budget phase 2 validates on phase 1's held-out shards (shorter samples, which a phase-2 run takes) in
# phase 1's batches, so on the same sequences and masks: the validation curve measures one thing across the budget.
if [[ $phase2_in_budget == true ]]; then
  set_eval_flags "$DATA_DIR_PHASE1"
  (( ${#EVAL_FLAGS[@]} )) && EVAL_FLAGS+=(--eval-batch-size "$train_batch_size")
else
  set_eval_flags "$DATA_DIR_PHASE2"
fi
phase2_flags=(--phase2 --input-dir "$DATA_DIR_PHASE2" --batch-size "$train_batch_size_phase2"
  --max-seq-length "${PHASE_SEQ_LENGTH[2]}" --max-predictions-per-seq "${PHASE_MAX_PREDICTIONS[2]}"
  --max-steps "$train_steps_phase2"
  --warmup-proportion "$warmup_proportion_phase2" --constant-proportion "$constant_proportion_phase2"
  --learning-rate "$learning_rate_phase2"
  --gradient-merge-steps "$gradient_accumulation_steps_phase2" --report-file "$RESULTS_DIR/dllogger_p2.json"
  "${EVAL_FLAGS[@]}" "${budget_flags_phase2[@]}")
if [[ "$enable_benchmark" == false ]]; then
  phase1_final="$RESULTS_DIR/$BERT_MODEL/phase1/$(final_step 1 "$train_steps")"
  # run_pretraining.py exits 0 after a SIGTERM checkpoint; phase 2 must wait for the end of phase 1 (under a
  # budget, run_pretraining.py checks the training time that the newest checkpoint records).
  [[ "$time_budget" != none || -d "$phase1_final" ]] \
    || die "phase 1 stopped before step $train_steps ($phase1_final missing); rerun to continue"
  phase2_flags+=(--from-phase1-final-params "$phase1_final")
fi
launch 2 "$train_batch_size_phase2" "$gradient_accumulation_steps_phase2" -- "${phase2_flags[@]}"
echo "finished phase 2"
plot 2
[[ "$enable_benchmark" == true ]] || echo "Final checkpoint: $RESULTS_DIR/$BERT_MODEL/phase2/$(final_step 2 "$train_steps_phase2")"
