#!/usr/bin/env bash
# Runs the real NVIDIA LDDL 0.1.0 preprocessor + load balancer on an LDDL-layout corpus, for
# benchmarks/bench_preprocess.py. LDDL lives in a Python 3.10 venv OUTSIDE this repository; nothing of it is
# committed. The setup follows ../shared/data/lddl-sample/README.md ("Exact commands and versions").
#
#   benchmarks/run_real_lddl.sh setup                     # create the venv (default /work/lddl-venv)
#   benchmarks/run_real_lddl.sh run SRC OUT VOCAB NPROC [extra preprocess_bert_pretrain flags...]
#
# SRC is the folder holding en/*.txt (LDDL's --wikipedia layout). OUT receives OUT/pre (preprocessor output,
# consumed by the balancer) and OUT/balanced (shards + .num_samples.json). Timings are printed as
# "lddl_preprocess_seconds=..." and "lddl_balance_seconds=..." lines.
set -euo pipefail

LDDL_VENV="${LDDL_VENV:-/work/lddl-venv}"
LDDL_PYTHON_BASE="${LDDL_PYTHON_BASE:-/root/.pyenv/versions/3.10.13/bin/python}"

setup() {
  if [[ -x "$LDDL_VENV/bin/preprocess_bert_pretrain" ]]; then
    echo "LDDL venv already at $LDDL_VENV"
    return
  fi
  "$LDDL_PYTHON_BASE" -m venv "$LDDL_VENV"
  "$LDDL_VENV/bin/pip" install --quiet --upgrade pip
  # lddl pins packages that do not build on this machine; the README lists the stack that works.
  "$LDDL_VENV/bin/pip" install --quiet --no-deps lddl==0.1.0
  "$LDDL_VENV/bin/pip" install --quiet dask==2021.7.1 distributed==2021.7.1 dask-mpi==2021.11.0 \
    transformers==4.16.2 tokenizers==0.23.3 pandas==1.5.3 numpy==1.26.4 pyarrow==12.0.1 nltk==3.10.4 \
    mpi4py==4.1.2 mpich==5.0.2
}

run() {
  if [[ $# -lt 4 ]]; then
    echo "usage: $0 run SRC OUT VOCAB NPROC [preprocess flags...]" >&2
    exit 2
  fi
  local src="$1" out="$2" vocab="$3" nproc="$4"
  shift 4
  # Offline: an untrained Punkt model (four empty punkt_tab files) instead of nltk's download.
  local nltk_data="$out/nltk_data"
  mkdir -p "$nltk_data/tokenizers/punkt_tab/english"
  local name
  for name in collocations.tab sent_starters.txt abbrev_types.txt ortho_context.tab; do
    : > "$nltk_data/tokenizers/punkt_tab/english/$name"
  done
  rm -rf "$out/pre" "$out/balanced"
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NLTK_DATA="$nltk_data"
  export PATH="$LDDL_VENV/bin:$PATH"
  local start end
  start=$(date +%s.%N)
  mpirun -np "$nproc" preprocess_bert_pretrain --schedule mpi --wikipedia "$src" --sink "$out/pre" \
    --vocab-file "$vocab" "$@" > "$out/preprocess.log" 2>&1
  end=$(date +%s.%N)
  echo "lddl_preprocess_seconds=$(echo "$end - $start" | bc)"
  start=$(date +%s.%N)
  mpirun -np "$nproc" balance_dask_output --indir "$out/pre" --outdir "$out/balanced" \
    --num-shards "${LDDL_NUM_SHARDS:-4}" > "$out/balance.log" 2>&1
  end=$(date +%s.%N)
  echo "lddl_balance_seconds=$(echo "$end - $start" | bc)"
}

case "${1:-}" in
  setup) setup ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 {setup|run SRC OUT VOCAB NPROC [flags...]}" >&2; exit 2 ;;
esac
