#!/usr/bin/env bash
# Builds the peers' Python environments that the benchmarks compare against, as venvs under DIR:
#
#   DIR/paddlenlp   paddlenlp 2.8.1 on paddlepaddle (the version requirements.txt pins), for
#                   bench_pretraining.py and bench_squad_inference.py (--paddlenlp-python)
#   DIR/torch       transformers on torch, for the same two benchmarks (--torch-python), and with our shard
#                   loader's packages for hf_pretraining_peer.py (the time-to-quality yardstick's peer)
#
#   benchmarks/setup_peers.sh [--python PY] [--torch-wheel PATH] [--find-links DIR] DIR
#   export PADDLEBERT_PEERS_DIR=DIR      # the benchmarks then find both environments by themselves
#
# A venv whose packages already import is left as it is, so running the script again is cheap. Each package
# is installed on its own, under the pins below as pip constraints, so a failure is one line naming it (pip's
# output is in DIR/<venv>.log).
#
# Torch, and what works where. PyPI's Linux torch wheel is the CUDA build: installed with its dependencies it
# downloads some GB of NVIDIA libraries, and without them it does not import on a machine without CUDA.
#   - CPU machine: give a CPU wheel, `--torch-wheel PATH` (or TORCH_WHEEL=PATH), or `--find-links DIR` of a
#     folder or page that holds CPU wheels (pip prefers 2.x.y+cpu there over PyPI's 2.x.y).
#   - Machine with CUDA installed: no option needed; the default installs PyPI's torch with --no-deps and
#     then only its pure-Python dependencies, and torch finds the system's CUDA libraries.
# Environment: PYTHON (default python3; the venvs' Python, 3.11 here), TORCH_WHEEL.
set -Eeuo pipefail
# Whatever else fails still ends in one line.
trap 'fail "line $LINENO: $BASH_COMMAND failed"' ERR

readonly PADDLENLP_VERSION=2.8.1
readonly TORCH_VERSION=2.13.0
readonly TRANSFORMERS_VERSION=5.24.0
# paddlenlp 2.8.1 imports names that later releases of these packages removed.
readonly PADDLENLP_PINS=("huggingface-hub<0.24" "aistudio-sdk<0.3" "datasets==2.20.0" "pyarrow<17")
# torch's requirements other than the NVIDIA libraries (from the wheel's metadata).
readonly TORCH_PURE_PYTHON_DEPS=("filelock" "typing-extensions>=4.10.0" "setuptools>=77.0.3" "sympy>=1.13.3"
                                 "networkx>=2.5.1" "jinja2" "fsspec>=0.8.5")

usage() {
  sed -n '2,/^set -Eeuo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "$1"
}

fail() {
  echo "setup_peers.sh: $*" >&2
  exit 1
}

python_bin="${PYTHON:-python3}"
torch_wheel="${TORCH_WHEEL:-}"
find_links=""
peers_dir=""
while (($#)); do
  case "$1" in
    --python) python_bin="${2:?--python needs a value}"; shift 2 ;;
    --torch-wheel) torch_wheel="${2:?--torch-wheel needs a value}"; shift 2 ;;
    --find-links) find_links="${2:?--find-links needs a value}"; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) fail "unknown option $1 (see --help)" ;;
    *) [[ -z "$peers_dir" ]] || fail "one DIR only, got $peers_dir and $1"; peers_dir="$1"; shift ;;
  esac
done
[[ -n "$peers_dir" ]] || usage 2 >&2
[[ -z "$torch_wheel" || -f "$torch_wheel" ]] || fail "--torch-wheel $torch_wheel: no such file"
command -v "$python_bin" >/dev/null || fail "--python $python_bin: not found"

script_dir="$(cd "$(dirname "$0")" && pwd)"
paddle_pin="$(grep -E '^paddlepaddle==' "$script_dir/../requirements.txt")" \
  || fail "requirements.txt: no paddlepaddle== pin"
mkdir -p "$peers_dir"
peers_dir="$(cd "$peers_dir" && pwd)"

# make_venv NAME: a fresh venv DIR/NAME with an up-to-date pip; its pip output goes to DIR/NAME.log.
make_venv() {
  rm -rf "${peers_dir:?}/$1"
  "$python_bin" -m venv "$peers_dir/$1" || fail "$python_bin -m venv $peers_dir/$1 failed"
  : >"$peers_dir/$1.log"
  install "$1" "" pip --upgrade
}

# install NAME CONSTRAINTS PACKAGE [pip options...]: pip install one package into DIR/NAME.
install() {
  local name="$1" constraints="$2" package="$3"
  shift 3
  local options=("$@")
  [[ -z "$constraints" ]] || options+=(--constraint "$constraints")
  [[ -z "$find_links" ]] || options+=(--find-links "$find_links")
  echo "  $name: pip install $package" >&2
  "$peers_dir/$name/bin/python" -m pip install --quiet "${options[@]}" "$package" >>"$peers_dir/$name.log" 2>&1 \
    || fail "pip install $package failed in $peers_dir/$name (log: $peers_dir/$name.log)"
}

# imports NAME MODULE...: whether DIR/NAME's Python imports every module (quietly).
imports() {
  local name="$1"
  shift
  [[ -x "$peers_dir/$name/bin/python" ]] || return 1
  local module
  for module in "$@"; do
    "$peers_dir/$name/bin/python" -c "import $module" >/dev/null 2>&1 || return 1
  done
}

# versions NAME MODULE...: "module version, ..." as DIR/NAME's Python reports them.
versions() {
  local name="$1"
  shift
  "$peers_dir/$name/bin/python" - "$@" <<'EOF' 2>/dev/null
import importlib, sys
print(", ".join(f"{name} {importlib.import_module(name).__version__}" for name in sys.argv[1:]))
EOF
}

# check_imports NAME MODULE...: fail with one line naming the first module that does not import.
check_imports() {
  local name="$1" module
  shift
  for module in "$@"; do
    imports "$name" "$module" || fail "$module was installed in $peers_dir/$name but does not import:" \
      "$("$peers_dir/$name/bin/python" -c "import $module" 2>&1 | tail -n 1)"
  done
}

build_paddlenlp() {
  local constraints="$peers_dir/paddlenlp-constraints.txt"
  make_venv paddlenlp
  printf '%s\n' "$paddle_pin" "paddlenlp==$PADDLENLP_VERSION" "${PADDLENLP_PINS[@]}" >"$constraints"
  local package
  for package in "$paddle_pin" "${PADDLENLP_PINS[@]}" "paddlenlp==$PADDLENLP_VERSION"; do
    install paddlenlp "$constraints" "$package"
  done
  check_imports paddlenlp paddle paddlenlp
}

build_torch() {
  local constraints="$peers_dir/torch-constraints.txt"
  make_venv torch
  if [[ -n "$torch_wheel" ]]; then
    # A wheel given by path carries its own version; the constraint must not contradict it.
    printf '%s\n' "transformers==$TRANSFORMERS_VERSION" >"$constraints"
    install torch "$constraints" "$torch_wheel"
  elif [[ -n "$find_links" ]]; then
    printf '%s\n' "transformers==$TRANSFORMERS_VERSION" >"$constraints"
    install torch "$constraints" "torch==$TORCH_VERSION"
  else
    printf '%s\n' "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" >"$constraints"
    install torch "$constraints" "torch==$TORCH_VERSION" --no-deps
    local package
    for package in "${TORCH_PURE_PYTHON_DEPS[@]}"; do
      install torch "$constraints" "$package"
    done
  fi
  # transformers must not replace the torch just installed (pip freeze would name a wheel file, not a version).
  "$peers_dir/torch/bin/python" -c "import torch; print(f'torch=={torch.__version__}')" >>"$constraints" 2>>"$peers_dir/torch.log" \
    || fail "torch was installed in $peers_dir/torch but does not import (log: $peers_dir/torch.log)"
  install torch "$constraints" "transformers==$TRANSFORMERS_VERSION"
  # benchmarks/hf_pretraining_peer.py reads our shards with our loader: its packages at requirements.txt's pins.
  local package
  while read -r package; do
    install torch "$constraints" "$package"
  done < <(grep -E '^(numpy|pyarrow|h5py|tokenizers)==' "$(dirname "$0")/../requirements.txt")
  check_imports torch torch transformers pyarrow h5py tokenizers
}

# peer NAME BUILD MODULE...: build DIR/NAME unless its modules already import; say which it was.
peer() {
  local name="$1" build="$2"
  shift 2
  local state="already there"
  if ! imports "$name" "$@"; then
    echo "building $peers_dir/$name" >&2
    "$build"
    state="built"
  fi
  echo "$name: $peers_dir/$name/bin/python ($(versions "$name" "$@")) $state"
}

peer paddlenlp build_paddlenlp paddle paddlenlp
peer torch build_torch torch transformers pyarrow h5py tokenizers
echo "export PADDLEBERT_PEERS_DIR=$peers_dir"
