#!/usr/bin/env bash
# Builds the BERT pretraining sets from raw text in NVIDIA's data layout, which scripts/run_pretraining.sh,
# run.sub and scripts/run_squad.sh read. Under the working dir (--working-dir, else $BERT_PREP_WORKING_DIR, else
# <repo>/data):
#   wikipedia/wikicorpus-en.xml.bz2        the English Wikipedia dump (downloaded)
#   wikipedia/extracted/en/                its text, extracted by WikiExtractor
#   wikipedia/source                       the corpus to preprocess: a link to it (to --corpus or to extracted/en),
#                                          or a folder of links to its files; never a copy
#   download/squad/v1.1/, v2.0/            SQuAD train and dev sets and the official evaluate-v1.1.py /
#                                          evaluate-v2.0.py (downloaded, md5 checked as NVIDIA's squad_download.sh)
#   pretrain/phase1/unbinned/parquet/      seq 128, static masking, NUM_SHARDS balanced shards
#   pretrain/phase2/bin_size_64/parquet/   seq 512, static masking, binned by 64 tokens, NUM_SHARDS shards per bin
#                                          (a bin with fewer samples gets fewer files, and preprocessing says so)
# A step whose output is already there is skipped, so a rerun continues where the last one stopped.
#
# From start (no --corpus): downloads and extracts Wikipedia, downloads SQuAD, then preprocesses. --squad-only
# downloads SQuAD alone (NVIDIA's users get it by commenting out the Wikipedia line). Every tool a mode needs
# (curl, md5sum, WikiExtractor) is checked before anything is downloaded. --mirror DIR_OR_URL takes every file
# from a local folder or another server instead, laid out as squad/v1.1/<file>, squad/v2.0/<file> and
# wikipedia/enwiki-latest-pages-articles.xml.bz2; --squad-md5sums FILE (md5sum's format, paths as
# v1.1/train-v1.1.json) checks another copy of SQuAD than NVIDIA's (default data/squad.md5, NVIDIA's sums).
# With --corpus DIR_OR_FILE: nothing is downloaded; the local corpus (any format lddl_preprocess.py reads, e.g. a
# WikiExtractor folder, its files compressed with xz, bzip2 or gzip or not, which are read as they are; a
# WikiText folder is read through its wiki.*.raw files only, because its wiki.*.tokens files are the same text
# with rare words replaced by <unk>) becomes wikipedia/source, then the two sets are made from it.
# The vocabulary is the shipped vocab/bert-large-uncased-vocab.txt (NVIDIA's recipes' file; the same bytes as
# bert-base-uncased's) unless --vocab-file gives another.
# Preprocessing keeps a random --sample-ratio of the articles, drawn from --seed (defaults: NVIDIA's recipes').
#
# Usage: data/create_datasets_from_start.sh [--corpus PATH | --squad-only] [--mirror DIR_OR_URL]
#          [--squad-md5sums FILE] [--working-dir DIR] [--vocab-file FILE] [--num-shards N] [--num-workers N]
#          [--seed N] [--sample-ratio R]
# Example on this machine: data/create_datasets_from_start.sh --corpus ../shared/data/wikipedia/en-2015 --num-shards 64
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
CORPUS=""
SQUAD_ONLY=false
MIRROR=""
SQUAD_MD5SUMS="$ROOT/data/squad.md5"
WORKING_DIR="${BERT_PREP_WORKING_DIR:-$ROOT/data}"
VOCAB_FILE="$ROOT/vocab/bert-large-uncased-vocab.txt"
NUM_SHARDS=4096
NUM_WORKERS="$(nproc)"
SEED=12439
SAMPLE_RATIO=0.9

WIKIPEDIA_DUMP="enwiki-latest-pages-articles.xml.bz2"
WIKIPEDIA_URL="https://dumps.wikimedia.org/enwiki/latest/$WIKIPEDIA_DUMP"
SQUAD_URL="https://rajpurkar.github.io/SQuAD-explorer/dataset"
# The official evaluation scripts, where NVIDIA's squad_download.sh fetches them.
SQUAD_EVAL_V1_URL="https://worksheets.codalab.org/rest/bundles/0xbcd57bee090b421c982906709c8c27e1/contents/blob/"
SQUAD_EVAL_V2_URL="https://worksheets.codalab.org/rest/bundles/0x6b567e1cf2e041ec80d7098f031c5c9e/contents/blob/"

# shellcheck source=scripts/common.sh
source "$ROOT/scripts/common.sh"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --corpus) CORPUS="${2:?--corpus needs a path}"; shift 2 ;;
    --squad-only) SQUAD_ONLY=true; shift ;;
    --mirror) MIRROR="${2:?--mirror needs a folder or URL}"; shift 2 ;;
    --squad-md5sums) SQUAD_MD5SUMS="${2:?--squad-md5sums needs a file}"; shift 2 ;;
    --working-dir) WORKING_DIR="${2:?--working-dir needs a path}"; shift 2 ;;
    --vocab-file) VOCAB_FILE="${2:?--vocab-file needs a path}"; shift 2 ;;
    --num-shards) NUM_SHARDS="${2:?--num-shards needs a number}"; shift 2 ;;
    --num-workers) NUM_WORKERS="${2:?--num-workers needs a number}"; shift 2 ;;
    --seed) SEED="${2:?--seed needs a number}"; shift 2 ;;
    --sample-ratio) SAMPLE_RATIO="${2:?--sample-ratio needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,33p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

require_int --num-shards "$NUM_SHARDS" 1
require_int --num-workers "$NUM_WORKERS" 1
require_int --seed "$SEED" 0
require_fraction --sample-ratio "$SAMPLE_RATIO"
[[ -n "$CORPUS" && "$SQUAD_ONLY" == true ]] && die "--corpus and --squad-only exclude each other"
[[ -n "$CORPUS" && -n "$MIRROR" ]] && die "--mirror is for downloads; --corpus downloads nothing"
[[ -f "$SQUAD_MD5SUMS" ]] || die "--squad-md5sums $SQUAD_MD5SUMS: file not found"
[[ -f "$VOCAB_FILE" ]] || die "--vocab-file $VOCAB_FILE: file not found"
if [[ -n "$MIRROR" ]]; then
  if [[ -d "$MIRROR" ]]; then
    MIRROR="file://$(cd "$MIRROR" && pwd)"
  elif [[ ! "$MIRROR" =~ ^[a-z]+:// ]]; then
    die "--mirror $MIRROR: neither a folder nor a URL"
  fi
  WIKIPEDIA_URL="$MIRROR/wikipedia/$WIKIPEDIA_DUMP"
fi

WIKIPEDIA_DIR="$WORKING_DIR/wikipedia"
SOURCE_DIR="$WIKIPEDIA_DIR/source"
PHASE1_DIR="$WORKING_DIR/pretrain/phase1/unbinned/parquet"
PHASE2_DIR="$WORKING_DIR/pretrain/phase2/bin_size_64/parquet"

require_tools() {  # tool...: each must be on PATH before anything is downloaded
  local missing=() tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [[ ${#missing[@]} -eq 0 ]] ||
    die "needs ${missing[*]} on PATH, and nothing was downloaded (apt-get install ${missing[*]}; the Docker image has it)"
}

require_wikiextractor() {
  "$PYTHON" -c "import wikiextractor" 2>/dev/null ||
    die "WikiExtractor is needed to extract the dump, and nothing was downloaded: pip install -r requirements.txt"
}

download() {  # url target [md5-name]: with md5-name, the file's md5 must be the one --squad-md5sums gives it
  local url="$1" target="$2" name="${3:-}"
  if [[ -s "$target" ]]; then
    if [[ -n "$name" ]] && ! check_md5 "$target" "$name" "$target"; then
      exit 1
    fi
    echo "have $target"
    return
  fi
  mkdir -p "$(dirname "$target")"
  echo "downloading $url"
  curl --fail --location --silent --show-error --connect-timeout 30 --retry 3 -o "$target.part" "$url" \
    || { rm -f "$target.part"; die "download failed: $url (no network? --corpus uses a local corpus, --mirror a local copy)"; }
  if [[ -n "$name" ]] && ! check_md5 "$target.part" "$name" "$url"; then
    rm -f "$target.part"
    exit 1
  fi
  mv "$target.part" "$target"
}

check_md5() {  # file name what: false, after one line naming `what`, unless file has the md5 listed for name
  local file="$1" name="$2" what="$3" expected actual
  expected="$(awk -v name="$name" '$2 == name { print $1 }' "$SQUAD_MD5SUMS")"
  [[ -n "$expected" ]] || die "--squad-md5sums $SQUAD_MD5SUMS: no md5 for $name"
  actual="$(md5sum < "$file" | cut -d' ' -f1)"
  [[ "$actual" == "$expected" ]] && return 0
  echo "${0##*/}: $what: md5 $actual, expected $expected ($SQUAD_MD5SUMS): corrupt, or another copy of $name" >&2
  return 1
}

download_squad() {  # v1.1 and v2.0: train and dev sets and the official evaluation scripts, md5 checked
  local squad_dir="$WORKING_DIR/download/squad" name
  local -A urls=(
    [v1.1/train-v1.1.json]="$SQUAD_URL/train-v1.1.json" [v1.1/dev-v1.1.json]="$SQUAD_URL/dev-v1.1.json"
    [v1.1/evaluate-v1.1.py]="$SQUAD_EVAL_V1_URL"
    [v2.0/train-v2.0.json]="$SQUAD_URL/train-v2.0.json" [v2.0/dev-v2.0.json]="$SQUAD_URL/dev-v2.0.json"
    [v2.0/evaluate-v2.0.py]="$SQUAD_EVAL_V2_URL"
  )
  if [[ -n "$MIRROR" ]]; then  # a mirror keeps every file under its version's folder
    for name in "${!urls[@]}"; do
      urls[$name]="$MIRROR/squad/$name"
    done
  fi
  for name in v1.1/train-v1.1.json v1.1/dev-v1.1.json v1.1/evaluate-v1.1.py v2.0/train-v2.0.json \
      v2.0/dev-v2.0.json v2.0/evaluate-v2.0.py; do
    download "${urls[$name]}" "$squad_dir/$name" "$name"
  done
  echo "SQuAD: $squad_dir (md5 checked)"
}

download_wikipedia() {  # the dump, extracted; CORPUS becomes the extracted text
  local dump="$WIKIPEDIA_DIR/wikicorpus-en.xml.bz2"
  local extracted="$WIKIPEDIA_DIR/extracted/en"
  download "$WIKIPEDIA_URL" "$dump"
  if [[ -d "$extracted" ]]; then
    echo "have $extracted"
  else
    rm -rf "$extracted.part"
    "$PYTHON" -m wikiextractor.WikiExtractor "$dump" --output "$extracted.part" --processes "$NUM_WORKERS"
    mv "$extracted.part" "$extracted"
  fi
  CORPUS="$extracted"
}

corpus_inputs() {  # what SOURCE_DIR is to link for $CORPUS, a path a line: a folder, or a WikiText folder's .raw files
  local corpus
  corpus="$(realpath "$CORPUS")"
  if [[ -d "$corpus" && -n "$(find "$corpus" -maxdepth 1 -name 'wiki.*.raw' -print -quit)" ]]; then
    find "$corpus" -maxdepth 1 -name 'wiki.*.raw' | LC_ALL=C sort
  else
    echo "$corpus"
  fi
}

linked_inputs() {  # what an existing SOURCE_DIR links, in corpus_inputs' form
  local link
  if [[ -L "$SOURCE_DIR" ]]; then
    realpath "$SOURCE_DIR"
  else
    for link in "$SOURCE_DIR"/*; do realpath "$link"; done | LC_ALL=C sort
  fi
}

link_source() {  # SOURCE_DIR: the corpus as preprocessing reads it, linked (a corpus is never copied or unpacked)
  local inputs=()
  mapfile -t inputs < <(corpus_inputs)
  if [[ -e "$SOURCE_DIR" || -L "$SOURCE_DIR" ]]; then
    # A rerun continues the same corpus; the shards of another one are not this corpus's, whatever they hold.
    [[ "$(linked_inputs)" == "$(printf '%s\n' "${inputs[@]}")" ]] ||
      die "--corpus $CORPUS: $WORKING_DIR was made from $(linked_inputs | paste -sd ' ') instead; use another" \
        "--working-dir, or remove $SOURCE_DIR and $WORKING_DIR/pretrain to start again"
    echo "have $SOURCE_DIR"
    return
  fi
  mkdir -p "$WIKIPEDIA_DIR"
  if [[ ${#inputs[@]} -eq 1 && -d "${inputs[0]}" ]]; then
    echo "corpus: ${inputs[0]}"
    ln -s "${inputs[0]}" "$SOURCE_DIR"
    return
  fi
  # A file, or a WikiText folder's .raw files: links to them in a folder, under their own names (a name ending in
  # .raw or .tokens tells their format)
  local raw_files=("${inputs[@]}")
  echo "corpus: ${raw_files[*]}"
  rm -rf "$SOURCE_DIR.part"
  mkdir "$SOURCE_DIR.part"
  ln -s "${raw_files[@]}" "$SOURCE_DIR.part/"
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
  # The corpus by its own paths, so that a message about one of its files names that file: the folder SOURCE_DIR
  # links to, or the files its links point to, in the order of their names (C collation, as Python sorts).
  local inputs=() link LC_ALL=C
  if [[ -L "$SOURCE_DIR" ]]; then
    inputs=("$(realpath "$SOURCE_DIR")")
  else
    for link in "$SOURCE_DIR"/*; do
      inputs+=("$(realpath "$link")")
    done
  fi
  "$PYTHON" "$ROOT/lddl_preprocess.py" --input "${inputs[@]}" --vocab-file "$VOCAB_FILE" --output-dir "$phase_dir.part" \
    --num-shards "$NUM_SHARDS" --num-workers "$NUM_WORKERS" --seed "$SEED" --sample-ratio "$SAMPLE_RATIO" --masking "$@"
  rm -rf "$phase_dir"
  mv "$phase_dir.part" "$phase_dir"
}

if [[ "$SQUAD_ONLY" == true ]]; then
  require_tools curl md5sum
  download_squad
  exit 0
fi
if [[ -z "$CORPUS" ]]; then
  require_tools curl md5sum
  require_wikiextractor
  download_wikipedia
  download_squad
else
  [[ -e "$CORPUS" ]] || die "--corpus $CORPUS: not found"
fi
echo "vocab: $VOCAB_FILE"
link_source
preprocess "$PHASE1_DIR" --max-seq-length 128
preprocess "$PHASE2_DIR" --max-seq-length 512 --bin-size 64
echo "done: $PHASE1_DIR $PHASE2_DIR"
