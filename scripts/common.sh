# Shell functions shared by the recipe scripts (run_pretraining*.sh, run_squad.sh, run_glue.sh, run.sub). Source it;
# it runs nothing by itself. Every function reports bad input as one line naming the argument, on stderr, and exits 1.
# shellcheck shell=bash
# The set_* functions return their results in global variables, which only the sourcing script reads:
# shellcheck disable=SC2034

die() {
  echo "${0##*/}: $*" >&2
  exit 1
}

# CODEDIR (the repository holding this scripts/ folder) and BERT_PREP_WORKING_DIR (default <repo>/data).
set_recipe_dirs() {
  CODEDIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  BERT_PREP_WORKING_DIR=${BERT_PREP_WORKING_DIR:-$CODEDIR/data}
}

require_at_most_args() {  # most arguments...
  local most="$1"
  shift
  (( $# <= most )) || die "at most $most positional arguments, got $#"
}

# NVIDIA's fine-tuning scripts start one process per GPU and default to 8. On a machine where nvidia-smi lists no
# GPU, eight processes would share the CPU cores and each hold a model: a count left to its default is then 1, said
# in one line on stderr; a count passed explicitly is kept (data parallel over gloo runs on a CPU too).
process_count() {  # count positional_argument_as_given: prints the count to launch
  local count="$1" given="$2" gpus
  if [[ -z "$given" ]] && (( count > 1 )); then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || gpus=0
    if (( gpus == 0 )); then
      echo "${0##*/}: no GPU found (nvidia-smi lists none): 1 process, not NVIDIA's default $count; num_gpus sets it" >&2
      count=1
    fi
  fi
  echo "$count"
}

require_choice() {  # name value choice...
  local name="$1" value="$2" choice
  shift 2
  for choice in "$@"; do
    [[ "$value" == "$choice" ]] && return 0
  done
  die "$name must be one of: $*; got '$value'"
}

require_int() {  # name value minimum
  if ! [[ "$2" =~ ^[0-9]+$ ]] || (( 10#$2 < $3 )); then
    die "$1 must be an integer >= $3, got '$2'"
  fi
}

require_number() {  # name value condition range: a plain decimal number v for which the awk condition holds
  awk -v v="$2" 'BEGIN { exit !(v ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ && ('"$3"')) }' \
    || die "$1 must be a number in $4, got '$2'"
}

require_fraction() {  # name value: a number in (0, 1]
  require_number "$1" "$2" 'v > 0 && v <= 1' '(0, 1]'
}

# The schedule's two numbers, checked by the recipes before any work (the run_*.py refuse them only at start).
require_learning_rate() {  # name value: a number > 0
  require_number "$1" "$2" 'v > 0' '(0, inf)'
}

require_warmup_proportion() {  # name value: a number in [0, 1]
  require_number "$1" "$2" 'v <= 1' '[0, 1]'
}

# PRECISION_FLAGS: the run_*.py flags of a precision (fp32|tf32|amp|fp16|bf16). amp and fp16 are the same
# float16 AMP (NVIDIA's run_pretraining.sh says amp, its run.sub fp16), starting at loss scale $2 with dynamic
# scaling; bf16 needs no loss scaling. fp32 turns TF32 off in Paddle's cuBLAS/cuDNN switches
# (--float32-precision fp32, and NVIDIA_TF32_OVERRIDE=0 for any other CUDA library), as Ampere and later GPUs
# otherwise use TF32 tensor cores for float32 matmuls; tf32 turns them on explicitly.
# On CPU, fp32 and tf32 are the same and AMP is a no-op (run_*.py then continue in float32).
set_precision_flags() {  # precision initial_loss_scale
  require_choice precision "$1" fp32 tf32 amp fp16 bf16
  case "$1" in
    fp32) PRECISION_FLAGS=(--float32-precision fp32); export NVIDIA_TF32_OVERRIDE=0 ;;
    tf32) PRECISION_FLAGS=(--float32-precision tf32) ;;
    amp|fp16) PRECISION_FLAGS=(--amp --use-dynamic-loss-scaling --scale-loss "$2") ;;
    bf16) PRECISION_FLAGS=(--amp --amp-dtype bfloat16) ;;
  esac
}

# BERT_MODEL_FLAGS and BERT_MODEL: --bert-model (and --config-file) for a config file or None. A config named
# like a known model (bert_configs/bert-large-uncased.json) keeps that name, which names the checkpoint folder
# <output-dir>/<bert-model>/; any other config is "custom".
set_bert_model() {  # config_file|None
  if [[ "$1" == None ]]; then
    BERT_MODEL=bert-large-uncased
    BERT_MODEL_FLAGS=(--bert-model "$BERT_MODEL")
    return
  fi
  [[ -f "$1" ]] || die "config file $1: no such file"
  BERT_MODEL="$(basename "$1" .json)"
  case "$BERT_MODEL" in
    bert-base-uncased|bert-base-cased|bert-large-uncased|bert-large-cased) ;;
    *) BERT_MODEL=custom ;;
  esac
  BERT_MODEL_FLAGS=(--bert-model "$BERT_MODEL" --config-file "$1")
}

# INFERENCE_FLAGS: the run_squad.py/run_glue.py flags that predict with the model exported to model_dir, from the
# environment variables INFERENCE_BACKEND, INFERENCE_PRECISION (default fp32) and INT8_QUANTIZATION; none when
# INFERENCE_BACKEND is unset, which the other two then need too. The task script says which of its modes only
# predict: mode_error is empty for such a mode, else what the mode must be (the refusal when INFERENCE_BACKEND is set).
set_inference_flags() {  # model_dir mode_error|""
  local model_dir="$1" mode_error="$2"
  INFERENCE_FLAGS=()
  if [[ -z "${INFERENCE_BACKEND:-}" ]]; then
    [[ -z "${INFERENCE_PRECISION:-}" ]] || die "INFERENCE_PRECISION is only used with INFERENCE_BACKEND"
    [[ -z "${INT8_QUANTIZATION:-}" ]] ||
      die "INT8_QUANTIZATION is only used with INFERENCE_BACKEND=onnxruntime and INFERENCE_PRECISION=int8"
    return 0
  fi
  local precision="${INFERENCE_PRECISION:-fp32}"
  require_choice INFERENCE_BACKEND "$INFERENCE_BACKEND" auto paddle onnxruntime openvino
  require_choice INFERENCE_PRECISION "$precision" fp32 bf16 fp16 int8
  [[ -z "$mode_error" ]] || die "INFERENCE_BACKEND predicts with an exported model: $mode_error"
  INFERENCE_FLAGS=(--inference-model-dir "$model_dir" --inference-backend "$INFERENCE_BACKEND"
    --inference-precision "$precision")
  # Unset: the task's default (run_squad.py's or run_glue.py's INT8_QUANTIZATION). Set, it needs the int8 ONNX
  # Runtime predictor it tunes; the Python script would refuse the flag too, but this line names the variable the
  # user set.
  if [[ -n "${INT8_QUANTIZATION:-}" ]]; then
    require_choice INT8_QUANTIZATION "$INT8_QUANTIZATION" dynamic static dynamic-per-channel static-per-channel \
      dynamic-per-channel-outliers
    [[ "$INFERENCE_BACKEND" == onnxruntime && "$precision" == int8 ]] ||
      die "INT8_QUANTIZATION is only used with INFERENCE_BACKEND=onnxruntime and INFERENCE_PRECISION=int8"
    INFERENCE_FLAGS+=(--int8-quantization "$INT8_QUANTIZATION")
  fi
}

# One run per output folder, as utils/folder_lock.py keeps it for the Python scripts, taken by a recipe before it
# writes anything into the folder (its log above all): a second run into a folder that a live run holds stops with
# one line naming the holder, and the live run's files stay as they were. The script locks
# <folder>/.paddlebert-<script>.lock (flock) for its life on a descriptor that its commands inherit, so that the lock
# lasts while any of them runs and a second run of the script is refused even while the first one's Python is
# starting (another recipe may share the folder: run_squad.sh's default is pretraining's results folder, its files
# named apart). It also checks that no Python run holds <python_folder>/.paddlebert.lock (one started by another
# script or by hand); the Python script it starts takes that lock itself. Where nothing can be locked (no flock
# command, a file system without locks), one line says so and the run goes on, as folder_lock.py does.
hold_output_folder() {  # name folder [python_folder]: name is the setting that gave folder; python_folder (default:
  # folder) is the one the Python script locks
  local name="$1" folder="$2" python_folder="${3:-$2}" status=0
  mkdir -p "$folder" "$python_folder"
  local lock="$folder/.paddlebert-${0##*/}.lock" holder="another ${0##*/}"
  { exec {OUTPUT_FOLDER_LOCK}>>"$lock"; } 2>/dev/null || die "$name $folder: not writable (cannot open $lock)"
  if ! command -v flock >/dev/null; then
    echo "Warning: $name $folder: not locked, there is no flock command (util-linux); nothing stops a second run" \
      "from writing into it" >&2
    return 0
  fi
  flock --nonblock --conflict-exit-code 75 "$OUTPUT_FOLDER_LOCK" 2>/dev/null || status=$?
  if (( status == 0 )); then
    printf '%s %s %s\n' "$$" "$HOSTNAME" "$(date +%Y-%m-%dT%H:%M:%S)" > "$lock"
    flock --nonblock --conflict-exit-code 75 "$python_folder/.paddlebert.lock" true 2>/dev/null || status=$?
    lock="$python_folder/.paddlebert.lock" holder="another run"
  fi
  local where="$name $folder"
  [[ "$python_folder" == "$folder" ]] || where+=": $python_folder"
  if (( status == 75 )); then
    die "$where: in use by $holder ($(lock_holder "$lock")); one run per folder: wait for it to end, or write to" \
      "another folder"
  elif (( status != 0 )); then
    echo "Warning: $where: not locked, its file system cannot lock files; nothing stops a second run from writing" \
      "into it" >&2
  fi
}

lock_holder() {  # lock_file: "PID p on host h since t", as folder_lock.py names the process that holds it
  local pid="" host="" since=""
  read -r pid host since < "$1" || true
  if [[ -n "$since" ]]; then
    echo "PID $pid on host $host since $since"
  else
    echo "a process that has not written its PID"
  fi
}

# Print a command, shell-quoted, then run it; with a log file, its output also goes there.
run_logged() {  # log_file|"" command...
  local log_file="$1"
  shift
  echo "+ $(printf '%q ' "$@")"
  run_to_log "$log_file" "$@"
}

run_to_log() {  # log_file|"" command...: run_logged without printing the command
  local log_file="$1"
  shift
  if [[ -z "$log_file" ]]; then
    "$@"
  else
    echo "Logs written to $log_file"
    : > "$log_file"
    # Both streams go to the log, and each stays what it was: errors on stderr (fd 3 carries stdout past the
    # inner pipe, which takes stderr).
    { "$@" 2>&1 1>&3 3>&- | log_lines "$log_file" >&2; exit "${PIPESTATUS[0]}"; } 3>&1 | log_lines "$log_file"
    return "${PIPESTATUS[0]}"
  fi
}

log_lines() {  # log_file: stdin to stdout and appended to log_file, until the command writing it has ended
  # A Ctrl-C or SIGTERM reaches the whole process group: the command's last lines (what it kept, how to resume) come
  # after it, and must still reach the terminal and the log.
  trap '' INT TERM HUP
  tee -a "$1"
}

# Run `python -m paddle.distributed.launch --log_dir log_dir ...` as run_logged does, with the launcher's own
# output in log_dir/launcherlog beside the ranks' workerlog.<n>, and one line saying so. What the ranks print
# shows as the launcher streams it (local rank 0's, stdout and stderr merged in its workerlog). Kept in
# launcherlog: the launcher's import-time warnings, its 30-line configuration dump and pod status lines, and,
# when a rank fails, its "Container failed !!!" report and its second copy of the end of the failed rank's log
# when that rank's output was shown already (local rank 0); another rank's copy is its only showing, so it
# shows. A failure then ends with one line on stderr naming the rank, its exit code and its log.
run_launcher() {  # log_file|"" log_dir launcher options, script and its arguments...
  local log_file="$1" log_dir="$2"
  shift 2
  local command=(python -m paddle.distributed.launch --log_dir "$log_dir" "$@")
  echo "+ $(printf '%q ' "${command[@]}")"
  mkdir -p "$log_dir"
  echo "Launcher output: $log_dir/launcherlog"
  run_to_log "$log_file" launcher_output "$log_dir/launcherlog" "${command[@]}"
}

launcher_output() {  # launcher_log command...: run_launcher's split of the launcher's output
  local launcher_log="$1"
  shift
  # Unbuffered, so that the launcher's stdout (the ranks' lines) and stderr (its own) keep their order in the pipe.
  local statuses
  # In a group left of ||, a failure does not end a script under set -e (pipefail): the statuses decide below.
  { PYTHONUNBUFFERED=1 "$@" 2>&1 | split_launcher_lines "$launcher_log"; statuses=("${PIPESTATUS[@]}"); } || true
  # A launcher that failed before its first log line started nothing (Paddle not importable, a bad option): the last
  # line of its output says why, and would otherwise only be in its log.
  if (( statuses[0] != 0 && statuses[1] == LAUNCHER_NOT_STARTED )); then
    echo "${0##*/}: paddle.distributed.launch stopped before it started any process: $(tail -n 1 "$launcher_log")" \
      "(its output: $launcher_log)" >&2
  fi
  return "${statuses[0]}"
}

LAUNCHER_NOT_STARTED=3  # split_launcher_lines' status when the launcher wrote lines, but no log line of its own

split_launcher_lines() {  # launcher_log: stdin to stdout, the launcher's own lines to launcher_log (appended)
  local launcher_log="$1" line wrote=false own=true describing=false repeating=false hide_repeat=false failure=""
  # A Ctrl-C or SIGTERM reaches the whole process group: this filter lives on until the launcher, which waits for
  # its ranks' last checkpoint, stops writing.
  trap '' INT TERM HUP
  while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ "$line" =~ ^LAUNCH\ [A-Z]+\  ]]; then
      own=false  # the lines before its first log line are its import-time warnings
      [[ "$line" == *"Container failed !!!" ]] && describing=true
      [[ "$line" == *" ERROR LOG DETAIL "* ]] && repeating=true
    elif $describing; then  # "Container rank R status failed cmd [...] code C log FILE"
      describing=false
      if [[ "$line" =~ ^Container\ rank\ ([0-9]+)\ .*\ code\ (-?[0-9]+)\ log\ (.*)$ ]]; then
        failure="Rank ${BASH_REMATCH[1]} failed with exit code ${BASH_REMATCH[2]}; its log: ${BASH_REMATCH[3]}"
        [[ "${BASH_REMATCH[3]}" == */workerlog.0 ]] && hide_repeat=true
      fi
    elif ! $own && ! { $repeating && $hide_repeat; }; then
      printf '%s\n' "$line"
      continue
    fi
    printf '%s\n' "$line" >> "$launcher_log"
    wrote=true
  done
  [[ -z "$failure" ]] || echo "$failure" >&2
  if $own && $wrote; then
    return "$LAUNCHER_NOT_STARTED"
  fi
}

folder_is_empty() {  # folder: true when it is missing or holds nothing
  [[ ! -d "$1" ]] || [[ -z "$(ls -A "$1")" ]]
}

# Each phase's sequence length and most masks per sequence, by phase number: NVIDIA's 128 and 20 for phase 1,
# 512 and 80 for phase 2. set_feature_flags raises the caps for a masked_lm_ratio above 0.15.
PHASE_SEQ_LENGTH=([1]=128 [2]=512)
NVIDIA_MAX_PREDICTIONS=([1]=20 [2]=80)
PHASE_MAX_PREDICTIONS=([1]=${NVIDIA_MAX_PREDICTIONS[1]} [2]=${NVIDIA_MAX_PREDICTIONS[2]})

# scripts/run_pretraining_p1.sh and _p2.sh: run run_pretraining.py on this node with the defaults both phases
# share (below), the phase's sequence length, mask cap and report file, the phase's own defaults in the array
# DEFAULT_FLAGS, then the caller's arguments, which override them (argparse keeps an option's last value). The
# launcher options --gpus N (8), --precision P (amp) and --fuse-mha true|false (true) are taken out first. Needs
# set_recipe_dirs.
launch_phase_with_named_args() {  # phase run_pretraining.py arguments...
  local phase="$1" gpus=8 precision=amp fuse_mha=true passed=()
  shift
  local shared_flags=(--vocab-file "$CODEDIR/vocab/bert-large-uncased-vocab.txt" --output-dir "$CODEDIR/results"
    --bert-model bert-large-uncased --last-step-of-checkpoint auto --optimizer Lamb --num-steps-per-checkpoint 200
    --log-freq 1 "--phase$phase" --max-seq-length "${PHASE_SEQ_LENGTH[phase]}"
    --max-predictions-per-seq "${PHASE_MAX_PREDICTIONS[phase]}" --report-file "$CODEDIR/results/dllogger_p$phase.json")
  while (( $# > 0 )); do
    case "$1" in
      --gpus|--precision|--fuse-mha)
        (( $# >= 2 )) || die "$1 needs a value"
        local name="${1#--}"
        name="${name//-/_}"
        printf -v "$name" '%s' "$2"
        shift 2 ;;
      --gpus=*) gpus="${1#*=}"; shift ;;
      --precision=*) precision="${1#*=}"; shift ;;
      --fuse-mha=*) fuse_mha="${1#*=}"; shift ;;
      *) passed+=("$1"); shift ;;
    esac
  done
  require_int --gpus "$gpus" 1
  require_choice --fuse-mha "$fuse_mha" true false
  set_precision_flags "$precision" 1048576
  local fuse_flags=()
  [[ "$fuse_mha" == true ]] && fuse_flags=(--fuse-mha)
  run_launcher "" log --nproc_per_node "$gpus" \
    "$CODEDIR/run_pretraining.py" "${shared_flags[@]}" "${DEFAULT_FLAGS[@]}" "${PRECISION_FLAGS[@]}" \
    "${fuse_flags[@]}" "${passed[@]}"
}

# The pre-training features beyond NVIDIA's recipe (README, "Beyond NVIDIA's recipe"): run_pretraining.sh takes them
# as arguments 27 and 36-42, run.sub as MASKING, HOLDOUT_FRACTION, EVAL_FREQ, NUM_EVAL_BATCHES, WHOLE_WORD_MASKING,
# MASKED_LM_RATIO, NO_NSP and PACK_SEQUENCES. set_feature_flags checks them and decides which script gets which
# flag; the caller passes the names of its variables, so that a message names the caller's own setting:
# - the masking flags go where the masks are drawn: into the shards (static: lddl_preprocess.py --masking and
#   whole-word masking and the ratio) or in the training loader (dynamic: lddl_preprocess.py --no-masking,
#   run_pretraining.py the other two). lddl_preprocess.py refuses them with --no-masking, run_pretraining.py
#   --whole-word-masking refuses statically masked shards, and its --masked-lm-ratio would do nothing there;
# - --no-nsp goes to both: single-segment shards and a model without the NSP head always go together;
# - --pack-sequences goes to training;
# - a holdout fraction > 0 goes to preprocessing, and the validation flags to training (set_holdout_flags and
#   set_eval_flags, per data folder).
# Results: PREPROCESS_FEATURE_FLAGS (lddl_preprocess.py), TRAIN_FEATURE_FLAGS (run_pretraining.py).
# Arguments: the names of masking holdout_fraction eval_freq num_eval_batches whole_word_masking masked_lm_ratio
# no_nsp pack_sequences.
set_feature_flags() {
  local masking="${!1}" holdout_fraction="${!2}" whole_word_masking="${!5}" masked_lm_ratio="${!6}" no_nsp="${!7}"
  local pack_sequences="${!8}" name
  require_choice "$1" "$masking" static dynamic
  require_number "$2" "$holdout_fraction" 'v >= 0 && v < 1' '[0, 1)'
  require_int "$3" "${!3}" 1
  require_int "$4" "${!4}" 1
  for name in "$5" "$7" "$8"; do
    require_choice "$name" "${!name}" true false
  done
  # (0, 1) is what run_pretraining.py accepts; lddl_preprocess.py also takes 1.
  require_number "$6" "$masked_lm_ratio" 'v > 0 && v < 1' '(0, 1)'

  # A phase masks at most ceil(ratio x sequence length) tokens a sequence, Google's rule for its cap, and never fewer
  # than NVIDIA's: at 0.15 the caps stay 20 and 80, at 0.3 they are 39 and 154, so that the ratio takes effect.
  local phase
  for phase in 1 2; do
    PHASE_MAX_PREDICTIONS[phase]=$(awk -v r="$masked_lm_ratio" -v s="${PHASE_SEQ_LENGTH[phase]}" \
      -v c="${NVIDIA_MAX_PREDICTIONS[phase]}" 'BEGIN { n = r * s; n = (n == int(n)) ? n : int(n) + 1
                                                      print (n > c) ? n : c }')
  done
  local masking_options=()
  [[ "$whole_word_masking" == true ]] && masking_options+=(--whole-word-masking)
  # 0.15 is both scripts' default.
  awk -v r="$masked_lm_ratio" 'BEGIN { exit !(r == 0.15) }' || masking_options+=(--masked-lm-ratio "$masked_lm_ratio")
  local nsp_flags=()
  [[ "$no_nsp" == true ]] && nsp_flags=(--no-nsp)
  if [[ "$masking" == static ]]; then
    PREPROCESS_FEATURE_FLAGS=(--masking "${masking_options[@]}" "${nsp_flags[@]}")
    TRAIN_FEATURE_FLAGS=("${nsp_flags[@]}")
  else
    PREPROCESS_FEATURE_FLAGS=(--no-masking "${nsp_flags[@]}")
    TRAIN_FEATURE_FLAGS=("${masking_options[@]}" "${nsp_flags[@]}")
  fi
  [[ "$pack_sequences" == true ]] && TRAIN_FEATURE_FLAGS+=(--pack-sequences)
  # For set_holdout_flags, set_eval_flags and set_eval_interval:
  FEATURE_HOLDOUT=("$2" "$holdout_fraction")
  FEATURE_EVAL_BATCHES=(--num-eval-batches "${!4}")
  FEATURE_EVAL_FLAGS=(--eval-freq "${!3}" "${FEATURE_EVAL_BATCHES[@]}")
}

# After set_feature_flags: validation each time the training time crosses a multiple of `minutes`
# (run_pretraining.py --eval-interval-minutes) instead of every eval_freq steps; none keeps eval_freq. A number needs
# a holdout fraction > 0, as the validation does.
set_eval_interval() {  # name minutes|none
  [[ "$2" == none ]] && return 0
  require_number "$1" "$2" 'v > 0' '(0, inf) or none'
  validating || die "$1 $2: validation needs ${FEATURE_HOLDOUT[0]} > 0, got ${FEATURE_HOLDOUT[1]}"
  FEATURE_EVAL_FLAGS=(--eval-interval-minutes "$2" "${FEATURE_EVAL_BATCHES[@]}")
}

validating() {  # after set_feature_flags: true when a holdout fraction > 0 was asked for
  awk -v f="${FEATURE_HOLDOUT[1]}" 'BEGIN { exit !(f > 0) }'
}

holdout_dir() {  # data_dir: where its held-out shards go
  echo "${1%/}_holdout"
}

# HOLDOUT_FLAGS: lddl_preprocess.py's held-out split of data_dir when validating, else none. The recipes
# preprocess a folder only when it is empty, so a filled one made without a held-out split is refused: it would
# never get one.
set_holdout_flags() {  # data_dir
  HOLDOUT_FLAGS=()
  validating || return 0
  HOLDOUT_FLAGS=(--holdout-fraction "${FEATURE_HOLDOUT[1]}" --holdout-dir "$(holdout_dir "$1")")
  if ! folder_is_empty "$1" && folder_is_empty "$(holdout_dir "$1")"; then
    die "${FEATURE_HOLDOUT[0]} ${FEATURE_HOLDOUT[1]}: $1 was made without a held-out split" \
      "($(holdout_dir "$1") is missing); remove $1 to preprocess it again"
  fi
}

set_eval_flags() {  # data_dir: EVAL_FLAGS, run_pretraining.py's validation flags for the phase reading it
  EVAL_FLAGS=()
  if validating; then
    EVAL_FLAGS=(--eval-dir "$(holdout_dir "$1")" "${FEATURE_EVAL_FLAGS[@]}")
  fi
}
