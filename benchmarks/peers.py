"""Where the benchmarks find their peers' Pythons: a flag per peer, by default inside $PADDLEBERT_PEERS_DIR.

benchmarks/setup_peers.sh DIR builds one venv per peer under DIR (DIR/paddlenlp, DIR/torch). A benchmark
adds the flags of the peers it runs with add_peer_flags and asks peer_python for a peer it is about to start;
a missing environment is a one-line exit naming the flag and saying how to build it.
"""

from __future__ import annotations

import argparse
import os
import sys

PEERS_DIR_VARIABLE = "PADDLEBERT_PEERS_DIR"
# peer -> (its flag, the venv under the peers' folder, what the venv holds)
PEER_ENVIRONMENTS = {
    "paddlenlp": ("--paddlenlp-python", "paddlenlp", "paddlenlp 2.8.1"),
    "transformers": ("--torch-python", "torch", "transformers on torch"),
}


def _destination(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_peer_flags(parser: argparse.ArgumentParser, *peers: str) -> None:
    """One `--<peer>-python` flag per peer, defaulting to the venv under $PADDLEBERT_PEERS_DIR when it is set."""
    peers_dir = os.environ.get(PEERS_DIR_VARIABLE)
    for peer in peers:
        flag, venv, holds = PEER_ENVIRONMENTS[peer]
        default = os.path.join(peers_dir, venv, "bin", "python") if peers_dir else None
        parser.add_argument(flag, default=default,
                            help=f"A Python with {holds} (default: ${PEERS_DIR_VARIABLE}/{venv}/bin/python).")


def peer_python(args: argparse.Namespace, peer: str, script: str) -> str:
    """The peer's Python from the command line; exits with one line naming the flag when it is missing."""
    flag, venv, _ = PEER_ENVIRONMENTS[peer]
    python = getattr(args, _destination(flag))
    how = (f"build the peers with `benchmarks/setup_peers.sh DIR` and set {PEERS_DIR_VARIABLE}=DIR "
           f"(or leave {peer} out of --only)")
    if python is None:
        sys.exit(f"{script}: {flag} is not given and {PEERS_DIR_VARIABLE} is not set; {how}")
    if not os.path.isfile(python):
        sys.exit(f"{script}: {flag} {python}: no such file; {how}")
    return python


def peer_pythons(args: argparse.Namespace, peers: dict[str, str], chosen: list[str], script: str) -> dict[str, str]:
    """The Python of every chosen contender that runs in a peer's venv (contender -> peer in `peers`); prints
    one line for each peer that --only leaves out."""
    for peer in sorted(set(peers.values())):
        if not any(peers.get(name) == peer for name in chosen):
            print(f"{peer}: skipped (not in --only)", flush=True)
    return {name: peer_python(args, peers[name], script) for name in chosen if name in peers}
