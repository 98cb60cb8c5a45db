"""PaddleNLP's BERT span model as a peer for bench_squad_inference.py; runs inside the PaddleNLP venv.

Protocol on stdin/stdout, one JSON object per line, so that the two processes take turns instead of
competing for the CPU: the worker builds its models, prints {"ready": true}, then answers every
{"mode": M, "batch_size": B, "seq_length": S} with {"seconds": wall time of one forward pass}.
Modes: dygraph, to_static, predictor. Weights are random (inference speed does not depend on them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import paddle
from paddlenlp.transformers import BertConfig, BertForQuestionAnswering


def build_runners(config_path: str, num_threads: int, export_dir: str) -> dict:
    with open(config_path, encoding="utf-8") as reader:
        values = json.load(reader)
    config = BertConfig(**{key: values[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
        "initializer_range")})
    model = BertForQuestionAnswering(config)
    model.eval()
    input_spec = [paddle.static.InputSpec([None, None], "int64", name) for name in ("input_ids", "token_type_ids")]
    static_model = BertForQuestionAnswering(config)
    static_model.set_state_dict(model.state_dict())
    static_model.eval()
    static_model = paddle.jit.to_static(static_model, input_spec=input_spec, full_graph=True)
    prefix = os.path.join(export_dir, "paddlenlp_qa")
    paddle.jit.save(model, prefix, input_spec=input_spec)
    program = prefix + ".json" if os.path.isfile(prefix + ".json") else prefix + ".pdmodel"
    predictor_config = paddle.inference.Config(program, prefix + ".pdiparams")
    predictor_config.disable_gpu()
    predictor_config.enable_mkldnn()
    predictor_config.disable_glog_info()
    predictor_config.set_cpu_math_library_num_threads(num_threads)
    predictor = paddle.inference.create_predictor(predictor_config)

    def eager(layer):
        def run(input_ids, token_type_ids):
            with paddle.no_grad():
                start, end = layer(paddle.to_tensor(input_ids), token_type_ids=paddle.to_tensor(token_type_ids))
            return start.numpy(), end.numpy()
        return run

    def predict(input_ids, token_type_ids):
        predictor.get_input_handle("input_ids").copy_from_cpu(input_ids)
        predictor.get_input_handle("token_type_ids").copy_from_cpu(token_type_ids)
        predictor.run()
        return [predictor.get_output_handle(name).copy_to_cpu() for name in predictor.get_output_names()]

    return {"dygraph": eager(model), "to_static": eager(static_model), "predictor": predict}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="BERT config JSON (Google's field names)")
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args()
    paddle.base.core.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as export_dir:
        runners = build_runners(args.config, args.threads, export_dir)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            shape = (request["batch_size"], request["seq_length"])
            input_ids = rng.integers(1000, 20000, shape, dtype=np.int64)
            token_type_ids = np.zeros(shape, dtype=np.int64)
            token_type_ids[:, shape[1] // 2:] = 1
            start = time.perf_counter()
            runners[request["mode"]](input_ids, token_type_ids)
            print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
