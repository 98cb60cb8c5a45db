"""Accuracy of the exported predictors per backend and precision: a real checkpoint fine-tuned on MRPC, SST-2 and
SQuAD, exported (--export-dir --export-onnx), and scored through `--inference-model-dir --inference-backend B
--inference-precision P [--int8-quantization Q]` for every B:P[:Q] of --predictors.

    python benchmarks/inference_accuracy.py --work-dir /tmp/inference_accuracy

- GLUE: all-MiniLM-L6-v2 (--model-dir) fine-tuned on MRPC's training set and on the first --sst2-train-examples
  rows of SST-2's; dev accuracy per predictor.
- SQuAD: only dev-v1.1.json is at hand, so the model fine-tunes on its first --squad-train-articles articles
  and predicts the last --squad-predict-articles (no article in both); per predictor EM and F1, and against
  the first predictor the fraction of questions whose predicted answer text is unchanged and the EM/F1 change.

Each fine-tuning is a few minutes on 2 cores. Accuracy does not depend on machine load, so the figures hold on a
busy machine; no time is measured here.

A rerun in the same --work-dir scores each task's export again without fine-tuning it again when the export was
made by the same command from the same training data and checkpoint (<task>/fine_tuning.json records them); the
predictors, and so the int8 models, which the backends rebuild when their quantization settings change, always
come from the code at hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
# The predictors scored by default: backend:precision[:int8 quantization] (inference.py's options).
PREDICTORS = ("paddle:fp32", "paddle:bf16", "onnxruntime:fp32", "onnxruntime:int8:dynamic",
              "onnxruntime:int8:static", "onnxruntime:int8:dynamic-per-channel", "onnxruntime:int8:static-per-channel",
              "onnxruntime:int8:dynamic-per-channel-outliers", "openvino:fp32", "openvino:bf16", "openvino:int8")


def answers_unchanged(reference: dict[str, str], predictions: dict[str, str]) -> float:
    """Fraction of the reference's questions whose predicted answer text is the same."""
    if set(reference) != set(predictions):
        raise ValueError("the predictions answer other questions than the reference")
    return sum(predictions[key] == text for key, text in reference.items()) / len(reference)


def split_articles(dataset: dict, train_articles: int, predict_articles: int) -> tuple[dict, dict]:
    """The first train_articles and the last predict_articles articles of a SQuAD json, as two datasets."""
    articles = dataset["data"]
    if train_articles + predict_articles > len(articles):
        raise ValueError(f"{train_articles} + {predict_articles} articles asked, the file has {len(articles)}")
    version = dataset.get("version", "1.1")
    return ({"version": version, "data": articles[:train_articles]},
            {"version": version, "data": articles[len(articles) - predict_articles:]})


def predictor_flags(predictor: str) -> list[str]:
    """The inference flags of a "backend:precision[:quantization]" predictor, e.g. onnxruntime:int8:static."""
    backend, precision, *quantization = predictor.split(":")
    flags = ["--inference-backend", backend, "--inference-precision", precision]
    return flags + (["--int8-quantization", quantization[0]] if quantization else [])


def head_rows(source: Path, target: Path, rows: int) -> None:
    """The header and the first `rows` data rows of a TSV."""
    with open(source, encoding="utf-8") as reader:
        lines = reader.readlines()
    target.write_text("".join(lines[:rows + 1]), encoding="utf-8")


def last_logged(report: Path, key: str) -> float:
    from utils.dllog import read_report

    return [record["data"][key] for record in read_report(report) if key in record.get("data", {})][-1]


def fine_tuning_record(command: list[str], train_file: Path, model_dir: Path) -> dict:
    """What a task's fine-tuned export depends on: the fine-tuning command, the content of its training file and
    the checkpoint it starts from (its path: the command reads it converted, under --work-dir)."""
    from utils.checksums import sha256_of_file

    return {"command": command, "train_file_sha256": sha256_of_file(train_file),
            "model_dir": str(model_dir.resolve())}


def read_record(path: Path) -> dict:
    """A fine_tuning.json; one that does not parse is left as it is for its owner to look at."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a fine-tuning record ({error}); delete it to fine-tune {path.parent.name} "
                         "again") from None


def fine_tune_once(folder: Path, record: dict, fine_tune: Callable[[list[str]], None]) -> None:
    """fine_tune(record["command"]) unless folder/export holds a fine-tuning with this record (folder/
    fine_tuning.json), so that a rerun only scores it; then write the record."""
    from utils.atomic_io import atomic_write_text

    written = folder / "fine_tuning.json"
    if (folder / "export" / "bert_paddle.onnx").is_file() and written.is_file() and read_record(written) == record:
        print(f"{folder / 'export'}: fine-tuned before as {written} records; scoring it again", flush=True)
        return
    written.unlink(missing_ok=True)  # a fine-tuning cut short leaves no record behind
    fine_tune(record["command"])
    atomic_write_text(written, json.dumps(record, indent=1) + "\n")


def glue_accuracy(args: argparse.Namespace, task: str, train_file: Path, common: list[str]) -> dict[str, float]:
    import run_glue

    folder = args.work_dir / task
    folder.mkdir(parents=True, exist_ok=True)
    command = [*common, "--task-name", task, "--do-train", "--train-file", str(train_file),
               "--from-pretrained-params", str(args.work_dir / "minilm.pdparams"), "--epochs", str(args.epochs),
               "--learning-rate", "5e-5", "--output-dir", str(folder / "train"), "--export-dir",
               str(folder / "export"), "--export-onnx", "--overwrite"]
    fine_tune_once(folder, fine_tuning_record(command, train_file, args.model_dir), run_glue.main)
    dev = args.glue_dir / {"mrpc": "MRPC", "sst-2": "SST-2"}[task] / "dev.tsv"
    accuracy = {}
    for predictor in args.predictors:
        output = folder / predictor.replace(":", "-")
        run_glue.main([*common, "--task-name", task, "--do-eval", "--predict-file", str(dev),
                       "--inference-model-dir", str(folder / "export"), *predictor_flags(predictor),
                       "--output-dir", str(output)])
        accuracy[predictor] = 100 * last_logged(output / "report.json", "accuracy")
    return accuracy


def squad_scores(args: argparse.Namespace, common: list[str]) -> dict[str, dict[str, float]]:
    import run_squad

    folder = args.work_dir / "squad"
    folder.mkdir(parents=True, exist_ok=True)
    with open(args.squad_file, encoding="utf-8") as reader:
        train, predict = split_articles(json.load(reader), args.squad_train_articles, args.squad_predict_articles)
    (folder / "train.json").write_text(json.dumps(train), encoding="utf-8")
    (folder / "predict.json").write_text(json.dumps(predict), encoding="utf-8")
    squad = ["--max-seq-length", str(args.squad_max_seq_length), "--doc-stride", "128"]
    command = [*common, *squad, "--do-train", "--train-file", str(folder / "train.json"),
               "--from-pretrained-params", str(args.work_dir / "minilm.pdparams"), "--epochs", str(args.epochs),
               "--learning-rate", "1e-4", "--warmup-proportion", "0.1", "--output-dir", str(folder / "train"),
               "--export-dir", str(folder / "export"), "--export-onnx", "--overwrite"]
    fine_tune_once(folder, fine_tuning_record(command, folder / "train.json", args.model_dir), run_squad.main)
    scores, answers = {}, {}
    for predictor in args.predictors:
        output = folder / predictor.replace(":", "-")
        run_squad.main([*common, *squad, "--do-eval", "--predict-file", str(folder / "predict.json"),
                        "--inference-model-dir", str(folder / "export"), *predictor_flags(predictor),
                        "--output-dir", str(output)])
        answers[predictor] = json.loads((output / "predictions.json").read_text(encoding="utf-8"))
        scores[predictor] = {"EM": last_logged(output / "report.json", "exact_match"),
                             "F1": last_logged(output / "report.json", "F1"),
                             "unchanged": 100 * answers_unchanged(answers[args.predictors[0]], answers[predictor])}
    scores["questions"] = len(answers[args.predictors[0]])
    return scores


def columns(predictor: str) -> list[str]:
    """The backend, precision and int8 quantization columns of a predictor."""
    backend, precision, *quantization = predictor.split(":")
    return [backend, precision, quantization[0] if quantization else "-"]


def glue_rows(task: str, accuracy: dict[str, float]) -> list[str]:
    reference = next(iter(accuracy.values()))
    return [f"| {task} | {' | '.join(columns(predictor))} | {value:.2f} | {value - reference:+.2f} |"
            for predictor, value in accuracy.items()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="models, exports and predictions go here")
    parser.add_argument("--model-dir", type=Path, default=SHARED / "models" / "all-MiniLM-L6-v2",
                        help="Hugging Face checkpoint to fine-tune (model.safetensors, config.json, vocab.txt)")
    parser.add_argument("--glue-dir", type=Path, default=SHARED / "data" / "glue")
    parser.add_argument("--squad-file", type=Path, default=SHARED / "data" / "squad" / "v1.1" / "dev-v1.1.json")
    parser.add_argument("--predictors", nargs="+", default=list(PREDICTORS),
                        help="backend:precision[:int8 quantization]; the first is the reference of the differences")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--sst2-train-examples", type=int, default=6000)
    parser.add_argument("--squad-train-articles", type=int, default=8)
    parser.add_argument("--squad-predict-articles", type=int, default=6)
    parser.add_argument("--squad-max-seq-length", type=int, default=256)
    parser.add_argument("--tasks", nargs="+", choices=("mrpc", "sst-2", "squad"), default=["mrpc", "sst-2", "squad"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import convert_checkpoint

    machine.print_header()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    convert_checkpoint.main(["hf2paddle", str(args.model_dir), str(args.work_dir / "minilm.pdparams"),
                             "--config-out", str(args.work_dir / "minilm.json"), "--overwrite"])  # a rerun redoes it
    common = ["--vocab-file", str(args.model_dir / "vocab.txt"), "--bert-model", "custom", "--config-file",
              str(args.work_dir / "minilm.json"), "--train-batch-size", "32", "--predict-batch-size", "32"]
    lines = ["| task | backend | precision | int8 quantization | score | minus " + args.predictors[0] + " |",
             "|---|---|---|---|---|---|"]
    if "mrpc" in args.tasks:
        lines += glue_rows("MRPC dev accuracy", glue_accuracy(args, "mrpc", args.glue_dir / "MRPC" / "train.tsv",
                                                              common))
    if "sst-2" in args.tasks:
        subset = args.work_dir / "sst2_train.tsv"
        head_rows(args.glue_dir / "SST-2" / "train.tsv", subset, args.sst2_train_examples)
        lines += glue_rows(f"SST-2 dev accuracy (trained on the first {args.sst2_train_examples} rows)",
                           glue_accuracy(args, "sst-2", subset, common))
    if "squad" in args.tasks:
        scores = squad_scores(args, common)
        reference = scores[args.predictors[0]]
        task = (f"SQuAD (trained on articles 1-{args.squad_train_articles} of dev-v1.1.json, predicted the last "
                f"{args.squad_predict_articles}: {scores['questions']} questions)")
        for predictor in args.predictors:
            score = scores[predictor]
            lines.append(f"| {task} | {' | '.join(columns(predictor))} | EM {score['EM']:.2f}, F1 {score['F1']:.2f} "
                         f"| EM {score['EM'] - reference['EM']:+.2f}, F1 {score['F1'] - reference['F1']:+.2f}; answer "
                         f"text unchanged {score['unchanged']:.1f}% |")
    print(f"\n{machine.header_line()}\n" + "\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from utils.cli import run_main

    sys.exit(run_main(main, "inference_accuracy.py"))
