#!/usr/bin/env bash
# Score a checkpoint downstream (downstream.py): fine-tune SST-2, MRPC, RTE, CoLA and SQuAD v1.1 from it with the
# fixed plan, and write <out_dir>/downstream.json and downstream.md (a table header and the checkpoint's row). A
# rerun in the same out_dir skips the finished fine-tuning runs.
#
#   bash scripts/run_downstream.sh results/bert-mini/custom/phase1/1200
#   bash scripts/run_downstream.sh random "" bert_configs/bert-mini-uncased.json      # the 0-minute row
#
# Positional arguments (default):
#   1 checkpoint (required)   a step folder, a .pdparams or .safetensors file, an NGC prefix or a Hugging Face BERT
#                             folder; random: a random initialisation of config_file
#   2 out_dir ($RESULTS_DIR/downstream/<name>)   <name>: the checkpoint's path below RESULTS_DIR (or as given)
#                             with - for /, or random-<config name>; -quick appended in quick mode
#   3 config_file (None)      the config of weights that come without one (NGC); needed for random
#   4 mode (standard)         standard | quick (a smoke test: 64 examples per task, one seed)
# Environment: RESULTS_DIR (default <repo>/results), VOCAB_FILE (default: a Hugging Face folder's vocab.txt, else
# <repo>/vocab/bert-base-uncased-vocab.txt), DATA_DIR (default <repo>/../shared/data: glue/<Task>/ and squad/v1.1/).
# The output, stdout and stderr, is also written to <out_dir>/logfile. A second run into an out_dir that a live run
# holds is refused before it writes anything there (common.sh's hold_output_folder).
set -euo pipefail

# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_at_most_args 4 "$@"
set_recipe_dirs

checkpoint=${1:-}
[[ -n "$checkpoint" ]] || die "give the checkpoint to score, or random with a config_file"
config_file=${3:-None}
mode=${4:-standard}
require_choice mode "$mode" standard quick
results=${RESULTS_DIR:-$CODEDIR/results}

flags=()
if [[ "$checkpoint" == random ]]; then
  [[ "$config_file" != None ]] || die "checkpoint random needs config_file, the network to initialise"
  flags+=(--random-init)
  name="random-$(basename "$config_file" .json)"
else
  flags+=("$checkpoint")
  name=$(realpath -m "$checkpoint")
  name=${name#"$(realpath -m "$results")"/}
  name=${name//\//-}
  name=${name#-}
fi
[[ "$mode" == quick ]] && name+="-quick"
out_dir=${2:-$results/downstream/$name}
flags+=(--output-dir "$out_dir")
[[ "$config_file" != None ]] && flags+=(--config-file "$config_file")
[[ "$mode" == quick ]] && flags+=(--quick)
[[ -n "${VOCAB_FILE:-}" ]] && flags+=(--vocab-file "$VOCAB_FILE")
flags+=(--data-dir "${DATA_DIR:-$(cd "$CODEDIR/.." && pwd)/shared/data}")

hold_output_folder out_dir "$out_dir"
run_logged "$out_dir/logfile" python "$CODEDIR/downstream.py" "${flags[@]}"
