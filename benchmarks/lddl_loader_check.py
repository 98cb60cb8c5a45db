"""Read shard folders with the real LDDL 0.1.0 Paddle loader (lddl.paddle.get_bert_pretrain_data_loader).

    python benchmarks/lddl_loader_check.py OUT_DIR [OUT_DIR ...] [--vocab-file VOCAB]

Shows that the files lddl_preprocess.py writes load in LDDL's own reader: for each folder it prints the samples
one epoch yields against the rows .num_samples.json lists, and the batch keys and shapes. LDDL is imported from
the venv that benchmarks/run_real_lddl.sh sets up (its loader is pure Python; nothing of it is in this
repository), with the two work-arounds ../shared/data/lddl-sample/README.md (section 4) lists for
paddlepaddle 3: a stand-in `paddle.fluid.framework` and the trainer endpoint variables.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import types
from pathlib import Path

import paddle

ROOT = Path(__file__).resolve().parent.parent
LDDL_SITE_PACKAGES = Path(os.environ.get("LDDL_VENV", "/work/lddl-venv")) / "lib/python3.10/site-packages"


def import_lddl_paddle() -> types.ModuleType:
    if not (LDDL_SITE_PACKAGES / "lddl").is_dir():
        raise SystemExit(f"{LDDL_SITE_PACKAGES}: no lddl here; run benchmarks/run_real_lddl.sh setup")
    sys.path.append(str(LDDL_SITE_PACKAGES))
    framework = types.ModuleType("paddle.fluid.framework")
    framework._non_static_mode = paddle.in_dynamic_mode  # lddl 0.1.0 asks the removed paddle.fluid for the mode
    fluid = types.ModuleType("paddle.fluid")
    fluid.framework = framework
    sys.modules.update({"paddle.fluid": fluid, "paddle.fluid.framework": framework})
    os.environ.setdefault("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170")
    os.environ.setdefault("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6170")
    import lddl.paddle

    logging.disable(logging.WARNING)  # LDDL logs every step
    return lddl.paddle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--vocab-file", default=str(ROOT.parent / "shared/vocab/bert-uncased-vocab.txt"))
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    lddl_paddle = import_lddl_paddle()
    for folder in args.folders:
        loader = lddl_paddle.get_bert_pretrain_data_loader(
            str(folder), vocab_file=args.vocab_file, shuffle_buffer_size=1,
            data_loader_kwargs={"batch_size": args.batch_size, "num_workers": 0})
        samples, shapes, keys = 0, set(), set()
        for batch in loader:
            samples += batch["input_ids"].shape[0]
            shapes.add(tuple(batch["input_ids"].shape))
            keys |= set(batch)
        listed = sum(json.loads((folder / ".num_samples.json").read_text()).values())
        print(json.dumps({"folder": str(folder), "samples_read": samples, "rows_listed": listed,
                          "keys": sorted(keys), "input_ids_shapes": sorted(shapes)}))


if __name__ == "__main__":
    main()
