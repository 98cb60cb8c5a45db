#!/usr/bin/env bash
# Builds the BERT pretraining sets from raw text, in LDDL's parquet format:
#   OUTPUT_DIR/phase1: seq 128, static masking, NUM_SHARDS balanced shards
#   OUTPUT_DIR/phase2: seq 512, static masking, binned by 64 tokens, NUM_SHARDS balanced shards per bin
#
# From start (no --corpus): downloads the English Wikipedia dump, extracts it with WikiExtractor, downloads
# SQuAD v1.1/v2.0 (for fine-tuning) and, if no vocab is given or found, Google's uncased BERT vocab.
# With --corpus DIR_OR_FILE: nothing is downloaded; the local corpus is preprocessed (any format
# lddl_preprocess.py reads; a WikiText folder is read through its wiki.*.raw files only, because its
# wiki.*.tokens files are the same text with rare words replaced by <unk>).
#
# Usage: data/create_datasets_from_start.sh [--corpus PATH] [--output-dir DIR] [--vocab-file FILE]
#                                           [--num-shards N] [--num-workers N]
# Example on this machine: data/create_datasets_from_start.sh --corpus ../shared/data/wikitext-2
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
CORPUS=""
OUTPUT_DIR="$ROOT/data/pretraining"
VOCAB_FILE=""
NUM_SHARDS=4
NUM_WORKERS="$(nproc)"

WIKIPEDIA_URL="https://dumps.wikimedia.org/enwiki/latest/enwiki-latest-pages-articles.xml.bz2"
SQUAD_URL="https://rajpurkar.github.io/SQuAD-explorer/dataset"
GOOGLE_VOCAB_ZIP="https://storage.googleapis.com/bert_models/2018_10_18/uncased_L-12_H-768_A-12.zip"

die() {
  echo "create_datasets_from_start.sh: $*" >&2
  exit 1
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --corpus) CORPUS="${2:?--corpus needs a path}"; shift 2 ;;
    --output-dir) OUTPUT_DIR="${2:?--output-dir needs a path}"; shift 2 ;;
    --vocab-file) VOCAB_FILE="${2:?--vocab-file needs a path}"; shift 2 ;;
    --num-shards) NUM_SHARDS="${2:?--num-shards needs a number}"; shift 2 ;;
    --num-workers) NUM_WORKERS="${2:?--num-workers needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

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
  local squad_dir="$OUTPUT_DIR/download/squad"
  download "$SQUAD_URL/train-v1.1.json" "$squad_dir/v1.1/train-v1.1.json"
  download "$SQUAD_URL/dev-v1.1.json" "$squad_dir/v1.1/dev-v1.1.json"
  download "$SQUAD_URL/train-v2.0.json" "$squad_dir/v2.0/train-v2.0.json"
  download "$SQUAD_URL/dev-v2.0.json" "$squad_dir/v2.0/dev-v2.0.json"
}

download_wikipedia() {
  local wiki_dir="$OUTPUT_DIR/download/wikipedia"
  local dump="$wiki_dir/enwiki-latest-pages-articles.xml.bz2"
  local extracted="$wiki_dir/extracted"
  download "$WIKIPEDIA_URL" "$dump"
  if [[ ! -d "$extracted" ]]; then
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
  local google_dir="$OUTPUT_DIR/download/google"
  download "$GOOGLE_VOCAB_ZIP" "$google_dir/uncased_L-12_H-768_A-12.zip"
  "$PYTHON" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('uncased_L-12_H-768_A-12/vocab.txt', sys.argv[2])" \
    "$google_dir/uncased_L-12_H-768_A-12.zip" "$google_dir"
  VOCAB_FILE="$google_dir/uncased_L-12_H-768_A-12/vocab.txt"
}

if [[ -z "$CORPUS" ]]; then
  download_wikipedia
  download_squad
else
  [[ -e "$CORPUS" ]] || die "--corpus $CORPUS: not found"
fi
find_vocab

INPUTS=("$CORPUS")
if [[ -d "$CORPUS" ]]; then
  mapfile -t RAW_FILES < <(find "$CORPUS" -maxdepth 1 -name 'wiki.*.raw' | sort)
  if [[ ${#RAW_FILES[@]} -gt 0 ]]; then
    INPUTS=("${RAW_FILES[@]}")
  fi
fi
echo "corpus: ${INPUTS[*]}"
echo "vocab: $VOCAB_FILE"

preprocess() {
  local phase_dir="$1"
  shift
  echo "preprocessing $phase_dir"
  "$PYTHON" "$ROOT/lddl_preprocess.py" --input "${INPUTS[@]}" --vocab-file "$VOCAB_FILE" \
    --output-dir "$phase_dir" --num-shards "$NUM_SHARDS" --num-workers "$NUM_WORKERS" --masking "$@"
}

preprocess "$OUTPUT_DIR/phase1" --max-seq-length 128
preprocess "$OUTPUT_DIR/phase2" --max-seq-length 512 --bin-size 64
echo "done: $OUTPUT_DIR/phase1 $OUTPUT_DIR/phase2"
