#!/usr/bin/env bash
# Runs the real NVIDIA LDDL 0.1.0 (preprocess_bert_pretrain, balance_dask_output) for
# benchmarks/bench_preprocess.py. LDDL lives in a Python 3.10 venv OUTSIDE this repository (nothing of it is
# committed); setup and offline settings follow ../shared/data/lddl-sample/README.md, section 2.
#
#   benchmarks/run_real_lddl.sh setup
#   benchmarks/run_real_lddl.sh preprocess NPROC SRC SINK VOCAB [more preprocess_bert_pretrain flags...]
#   benchmarks/run_real_lddl.sh balance NPROC INDIR OUTDIR NUM_SHARDS
#
# SRC is the folder holding en/*.txt (LDDL's --wikipedia layout). With --schedule mpi, MPI rank 0 is the dask
# scheduler and rank 1 the client, so NPROC = 2 + the number of dask workers.
# Environment: LDDL_VENV (default /work/lddl-venv), LDDL_PYTHON (default pyenv's 3.10.13).
set -euo pipefail

LDDL_VENV="${LDDL_VENV:-/work/lddl-venv}"
LDDL_PYTHON="${LDDL_PYTHON:-/root/.pyenv/versions/3.10.13/bin/python}"

setup() {
  if [[ -x "$LDDL_VENV/bin/preprocess_bert_pretrain" ]]; then
    echo "LDDL already installed in $LDDL_VENV"
    return
  fi
  "$LDDL_PYTHON" -m venv "$LDDL_VENV"
  "$LDDL_VENV/bin/pip" install --quiet --upgrade pip
  # lddl's own pins do not install here; this is the stack the README found to work.
  "$LDDL_VENV/bin/pip" install --quiet --no-deps lddl==0.1.0
  "$LDDL_VENV/bin/pip" install --quiet dask==2021.7.1 distributed==2021.7.1 dask-mpi==2021.11.0 \
    transformers==4.16.2 tokenizers==0.23.3 pandas==1.5.3 numpy==1.26.4 pyarrow==12.0.1 nltk==3.10.4 \
    mpi4py==4.1.2 mpich==5.0.2
}

offline_environment() {
  # An untrained Punkt model: four empty punkt_tab files, so nltk needs no download.
  local nltk_data="$LDDL_VENV/nltk_data_untrained"
  mkdir -p "$nltk_data/tokenizers/punkt_tab/english"
  local name
  for name in collocations.tab sent_starters.txt abbrev_types.txt ortho_context.tab; do
    : > "$nltk_data/tokenizers/punkt_tab/english/$name"
  done
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NLTK_DATA="$nltk_data" PATH="$LDDL_VENV/bin:$PATH"
}

preprocess() {
  local nproc="$1" src="$2" sink="$3" vocab="$4"
  shift 4
  offline_environment
  mpirun -np "$nproc" preprocess_bert_pretrain --schedule mpi --wikipedia "$src" --sink "$sink" \
    --vocab-file "$vocab" "$@"
}

balance() {
  local nproc="$1" indir="$2" outdir="$3" num_shards="$4"
  offline_environment
  mpirun -np "$nproc" balance_dask_output --indir "$indir" --outdir "$outdir" --num-shards "$num_shards"
}

usage() {
  echo "usage: $0 setup | preprocess NPROC SRC SINK VOCAB [flags...] | balance NPROC INDIR OUTDIR NUM_SHARDS" >&2
  exit 2
}

command="${1:-}"
[[ $# -gt 0 ]] && shift
case "$command" in
  setup) setup ;;
  preprocess) [[ $# -ge 4 ]] || usage; preprocess "$@" ;;
  balance) [[ $# -eq 4 ]] || usage; balance "$@" ;;
  *) usage ;;
esac
