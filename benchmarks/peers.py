"""The benchmarks' choice of contenders (--only) and where they find their peers' Pythons: a flag per peer,
by default inside $PADDLEBERT_PEERS_DIR.

benchmarks/setup_peers.sh DIR builds one venv per peer under DIR (DIR/paddlenlp, DIR/torch). A benchmark
adds --only and the flags of its peers with add_contender_flags, reads --only with chosen_contenders, and
asks peer_pythons for the peers it is about to start; a missing environment is a one-line exit naming the
flag and saying how to build it.
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


def add_contender_flags(parser: argparse.ArgumentParser, contenders: tuple[str, ...], *peers: str) -> None:
    """--only, and one `--<peer>-python` flag per peer, defaulting to the venv under $PADDLEBERT_PEERS_DIR."""
    parser.add_argument("--only", default=",".join(contenders),
                        help=f"Comma-separated contenders to run, from {','.join(contenders)}.")
    peers_dir = os.environ.get(PEERS_DIR_VARIABLE)
    for peer in peers:
        flag, venv, holds = PEER_ENVIRONMENTS[peer]
        default = os.path.join(peers_dir, venv, "bin", "python") if peers_dir else None
        parser.add_argument(flag, default=default,
                            help=f"A Python with {holds} (default: ${PEERS_DIR_VARIABLE}/{venv}/bin/python).")


def chosen_contenders(parser: argparse.ArgumentParser, args: argparse.Namespace,
                      contenders: tuple[str, ...]) -> list[str]:
    """The contenders --only names, in its order; parser.error naming --only for an unknown one."""
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    if not names or set(names) - set(contenders):
        parser.error(f"--only {args.only}: expected some of {','.join(contenders)}")
    return names


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
