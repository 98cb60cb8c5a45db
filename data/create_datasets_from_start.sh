#!/usr/bin/env bash
# Builds the BERT pretraining sets from raw text in NVIDIA's data layout, which scripts/run_pretraining.sh,
# run.sub and scripts/run_squad.sh read. Under the working dir (--working-dir, else $BERT_PREP_WORKING_DIR, else
# <repo>/data):
#   wikipedia/wikicorpus-en.xml.bz2        the English Wikipedia dump (downloaded)
#   wikipedia/extracted/en/                its text, extracted by WikiExtractor
#   wikipedia/source/en/<i>.txt            LDDL's source layout: one `wiki-<n> <text>` line per article
#   download/squad/v1.1/, v2.0/            SQuAD train and dev sets (downloaded)
#   pretrain/phase1/unbinned/parquet/      seq 128, static masking, NUM_SHARDS balanced shards
#   pretrain/phase2/bin_size_64/parquet/   seq 512, static masking, binned by 64 tokens, NUM_SHARDS shards per bin
# A step whose output is already there is skipped, so a rerun continues where the last one stopped.
#
# From start (no --corpus): downloads and extracts Wikipedia, downloads SQuAD v1.1/v2.0 and, if no vocab is given
# or found, the uncased BERT vocab (vocab/download_vocab.py, into vocab/ where the recipes look for it).
# With --corpus DIR_OR_FILE: nothing is downloaded; the local corpus (any format lddl_preprocess.py reads; a
# WikiText folder is read through its wiki.*.raw files only, because its wiki.*.tokens files are the same text
# with rare words replaced by <unk>) becomes wikipedia/source, then the two sets are made from it.
# Preprocessing keeps a random --sample-ratio of the articles, drawn from --seed (defaults: NVIDIA's recipes').
#
# Usage: data/create_datasets_from_start.sh [--corpus PATH] [--working-dir DIR] [--vocab-file FILE]
#          [--num-shards N] [--num-workers N] [--seed N] [--sample-ratio R]
# Example on this machine: data/create_datasets_from_start.sh --corpus ../shared/data/wikitext-2 --num-shards 4
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
CORPUS=""
WORKING_DIR="${BERT_PREP_WORKING_DIR:-$ROOT/data}"
VOCAB_FILE=""
NUM_SHARDS=4096
NUM_WORKERS="$(nproc)"
SEED=12439
SAMPLE_RATIO=0.9

WIKIPEDIA_URL="https://dumps.wikimedia.org/enwiki/latest/enwiki-latest-pages-articles.xml.bz2"
SQUAD_URL="https://rajpurkar.github.io/SQuAD-explorer/dataset"

# shellcheck source=scripts/common.sh
source "$ROOT/scripts/common.sh"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --corpus) CORPUS="${2:?--corpus needs a path}"; shift 2 ;;
    --working-dir) WORKING_DIR="${2:?--working-dir needs a path}"; shift 2 ;;
    --vocab-file) VOCAB_FILE="${2:?--vocab-file needs a path}"; shift 2 ;;
    --num-shards) NUM_SHARDS="${2:?--num-shards needs a number}"; shift 2 ;;
    --num-workers) NUM_WORKERS="${2:?--num-workers needs a number}"; shift 2 ;;
    --seed) SEED="${2:?--seed needs a number}"; shift 2 ;;
    --sample-ratio) SAMPLE_RATIO="${2:?--sample-ratio needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

require_int --num-shards "$NUM_SHARDS" 1
require_int --num-workers "$NUM_WORKERS" 1
require_int --seed "$SEED" 0
require_fraction --sample-ratio "$SAMPLE_RATIO"

WIKIPEDIA_DIR="$WORKING_DIR/wikipedia"
SOURCE_DIR="$WIKIPEDIA_DIR/source"
PHASE1_DIR="$WORKING_DIR/pretrain/phase1/unbinned/parquet"
PHASE2_DIR="$WORKING_DIR/pretrain/phase2/bin_size_64/parquet"

download() {
  local url="$1" target="$2"
  if [[ -s "$target" ]]; then
    echo "have $target"
    return
  fi
  mkdir -p "$(dirname "$target")"
  echo "downloading $url"
  curl --fail --location --silent --show-error --connect-timeout 30 --retry 3 -o "$target.part" "$url" \
    || die "download failed: $url (no network? pass --corpus to use a local corpus)"
  mv "$target.part" "$target"
}

download_squad() {
  local squad_dir="$WORKING_DIR/download/squad"
  download "$SQUAD_URL/train-v1.1.json" "$squad_dir/v1.1/train-v1.1.json"
  download "$SQUAD_URL/dev-v1.1.json" "$squad_dir/v1.1/dev-v1.1.json"
  download "$SQUAD_URL/train-v2.0.json" "$squad_dir/v2.0/train-v2.0.json"
  download "$SQUAD_URL/dev-v2.0.json" "$squad_dir/v2.0/dev-v2.0.json"
}

download_wikipedia() {  # the dump, extracted; CORPUS becomes the extracted text
  local dump="$WIKIPEDIA_DIR/wikicorpus-en.xml.bz2"
  local extracted="$WIKIPEDIA_DIR/extracted/en"
  download "$WIKIPEDIA_URL" "$dump"
  if [[ -d "$extracted" ]]; then
    echo "have $extracted"
  else
    "$PYTHON" -c "import wikiextractor" 2>/dev/null \
      || die "WikiExtractor is needed to extract $dump: pip install wikiextractor==3.0.6"
    "$PYTHON" -m wikiextractor.WikiExtractor "$dump" --output "$extracted.part" --processes "$NUM_WORKERS"
    mv "$extracted.part" "$extracted"
  fi
  CORPUS="$extracted"
}

find_vocab() {
  if [[ -n "$VOCAB_FILE" ]]; then
    [[ -f "$VOCAB_FILE" ]] || die "--vocab-file $VOCAB_FILE: file not found"
    return
  fi
  local candidate
  for candidate in "$ROOT/vocab/bert-uncased-vocab.txt" "$ROOT/../shared/vocab/bert-uncased-vocab.txt"; do
    if [[ -f "$candidate" ]]; then
      VOCAB_FILE="$candidate"
      return
    fi
  done
  "$PYTHON" "$ROOT/vocab/download_vocab.py" uncased
  VOCAB_FILE="$ROOT/vocab/bert-uncased-vocab.txt"
}

write_source() {  # the corpus files, as LDDL's source layout in SOURCE_DIR
  if [[ -d "$SOURCE_DIR/en" ]]; then
    echo "have $SOURCE_DIR"
    return
  fi
  local inputs=("$CORPUS")
  if [[ -d "$CORPUS" ]]; then
    local raw_files
    mapfile -t raw_files < <(find "$CORPUS" -maxdepth 1 -name 'wiki.*.raw' | sort)
    [[ ${#raw_files[@]} -gt 0 ]] && inputs=("${raw_files[@]}")
  fi
  echo "corpus: ${inputs[*]}"
  rm -rf "$SOURCE_DIR.part"
  "$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import corpus as p
p.convert_to_lddl_source(sys.argv[3:], sys.argv[2])' "$ROOT" "$SOURCE_DIR.part" "${inputs[@]}"
  mv "$SOURCE_DIR.part" "$SOURCE_DIR"
}

preprocess() {  # phase_dir lddl_preprocess.py flags...
  local phase_dir="$1"
  shift
  if ! folder_is_empty "$phase_dir"; then
    echo "have $phase_dir"
    return
  fi
  echo "preprocessing $phase_dir"
  rm -rf "$phase_dir.part"
  "$PYTHON" "$ROOT/lddl_preprocess.py" --input "$SOURCE_DIR" --vocab-file "$VOCAB_FILE" --output-dir "$phase_dir.part" \
    --num-shards "$NUM_SHARDS" --num-workers "$NUM_WORKERS" --seed "$SEED" --sample-ratio "$SAMPLE_RATIO" --masking "$@"
  rm -rf "$phase_dir"
  mv "$phase_dir.part" "$phase_dir"
}

if [[ -z "$CORPUS" ]]; then
  download_wikipedia
  download_squad
else
  [[ -e "$CORPUS" ]] || die "--corpus $CORPUS: not found"
fi
find_vocab
echo "vocab: $VOCAB_FILE"
write_source
preprocess "$PHASE1_DIR" --max-seq-length 128
preprocess "$PHASE2_DIR" --max-seq-length 512 --bin-size 64
echo "done: $PHASE1_DIR $PHASE2_DIR"
