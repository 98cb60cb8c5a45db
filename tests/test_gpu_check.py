"""scripts/gpu_check.sh on a CPU: its fp32 and CPU rows run and pass, every GPU row is listed as skipped, a row
that fails makes it exit 1 and keeps its work folder, and its data-parallel row (GPU-only in the script) compares
a two-rank launch with one process correctly, run here over gloo. Then each defect the rows exist for is planted
(an update that changes nothing, every step skipped, AMP not applied, a loss scale left in the loss, a wrong
attention mask, a resume across AMP levels that goes ahead, affinity not applied, data-parallel gradient merge
that skips or goes NaN) and the row that must catch it is shown to fail."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, shared_dir
from messages import assert_one_line

sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402  (scripts/ is put on the path just above)

SCRIPT = ROOT / "scripts" / "gpu_check.sh"
GPU_SKIP = "skipped (no GPU)"


def run_check(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "CI": "true", "PADDLEBERT_NUM_THREADS": "1", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=environment,
                          timeout=900)


def table_rows(output: str) -> dict[str, str]:
    """Row name -> status, read from the printed table (columns are separated by two or more spaces)."""
    lines = output.splitlines()
    start = next(index for index, line in enumerate(lines) if re.match(r"row\s{2,}status\s{2,}figure", line))
    rows = {}
    for line in lines[start + 2:]:
        if not line.strip():
            break
        name, status = re.split(r"\s{2,}", line)[:2]
        rows[name] = status
    return rows


def expected_rows() -> list[str]:
    """Every row the issues ask for, spelled out here rather than taken from the script."""
    rows = ["data: LDDL shards"]
    runs = [("seq128", ["fp32", "tf32", "fp16-O1", "fp16-O2", "bf16-O1", "bf16-O2"]),
            ("seq512", ["fp32", "fp16-O1", "bf16-O1"]), ("seq128 fuse-mha", ["fp32", "fp16-O2"]),
            ("seq128 pack-sequences", ["fp32", "fp16-O1"])]
    for suffix, precisions in runs:
        for precision in precisions:
            rows.append(f"pretrain {precision} {suffix}")
            if precision != "fp32":
                rows.append(f"step-1 loss {precision} vs fp32 {suffix}")
            rows.append(f"learns {precision} {suffix}")
    rows += [f"sequence_output {case} vs CPU" for case in (
        "flash, padded, fp16", "memory-efficient, padded, fp32", "varlen flash, packed, fp16",
        "memory-efficient, packed, fp32")]
    rows += [f"sequence_output math, {rows_kind}, fp32 vs CPU kernels" for rows_kind in ("padded", "packed")]
    return rows + ["cpu affinity", "kill and resume fp32", "kill and resume fp16-O2", "resume O2 checkpoint at O1",
                   "data: SQuAD", "squad train, predict, export", "squad predictor fp32", "squad predictor fp16",
                   "data: GLUE MRPC", "glue mrpc", "data parallel 2 GPUs vs 1",
                   "data parallel 2 GPUs gradient merge 2 fp16-O1", "data parallel 2 GPUs gradient merge 2 fp16-O2",
                   "total time"]


CPU_ROWS = {"data: LDDL shards", "kill and resume fp32", "data: SQuAD", "squad train, predict, export",
            "squad predictor fp32", "data: GLUE MRPC", "glue mrpc", "cpu affinity",
            "sequence_output math, padded, fp32 vs CPU kernels", "sequence_output math, packed, fp32 vs CPU kernels",
            *(f"{kind} fp32 {suffix}" for kind in ("pretrain", "learns")
              for suffix in ("seq128", "seq512", "seq128 fuse-mha", "seq128 pack-sequences"))}


def test_cpu_run_passes_its_fp32_rows_and_lists_the_gpu_rows_as_skipped(tmp_path):
    work = tmp_path / "work"
    result = run_check("--work-dir", str(work))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    rows = table_rows(result.stdout)
    assert list(rows) == expected_rows()
    assert {name: status for name, status in rows.items() if name in CPU_ROWS} == dict.fromkeys(CPU_ROWS, "pass")
    assert {name: status for name, status in rows.items() if name not in CPU_ROWS} == \
        dict.fromkeys(set(rows) - CPU_ROWS, GPU_SKIP)
    # --work-dir keeps every run's log; the resume row's killed run really was killed mid-run.
    killed = (work / "logs" / "resume_fp32_killed.log").read_text()
    assert "step 3/8" in killed and "step 8/8" not in killed
    assert "Resuming from" in (work / "logs" / "resume_fp32_rerun.log").read_text()


def test_a_failing_row_exits_1_and_keeps_the_work_folder(tmp_path):
    # A shared data folder whose WikiText-2 file is empty: the shards cannot be made.
    broken = tmp_path / "shared"
    (broken / "data" / "wikitext-2").mkdir(parents=True)
    (broken / "data" / "wikitext-2" / "wiki.test.raw").write_text("")
    result = run_check(PADDLEBERT_SHARED_DIR=str(broken), TMPDIR=str(tmp_path))
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    rows = table_rows(result.stdout)
    assert rows["data: LDDL shards"] == "FAIL"
    assert rows["pretrain fp32 seq128"] == "skipped (needs data: LDDL shards)"
    assert "FAIL data: LDDL shards: lddl_preprocess 128: exit status 1" in result.stdout
    kept = re.search(r"inputs, outputs and logs kept in (\S+)", result.stdout)
    assert kept and Path(kept.group(1)).parent == tmp_path
    assert "corpus has no non-empty files" in (Path(kept.group(1)) / "logs" / "lddl_preprocess_128.log").read_text()


def test_unknown_argument_is_one_line_naming_it():
    result = run_check("--gpus", "2")
    assert result.returncode == 1
    assert_one_line(result.stderr, "gpu_check.sh: ", "unknown argument '--gpus'", "--work-dir DIR")


def test_data_parallel_row_compares_two_ranks_with_one_process(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLEBERT_NUM_THREADS", "1")
    check = gpu_check.GpuCheck(tmp_path, gpus=0, shared=shared_dir() or tmp_path / "no-shared")
    check.prepare_pretraining_data()
    figure, passed = check.data_parallel(ranks=2)
    assert passed, figure
    # The comparison can fail: one process on one batch of the per-rank size (half the data) ends elsewhere.
    argv = [str(arg) for arg in check.data_parallel_argv(tmp_path / "data-parallel")[1:]]
    launched = gpu_check.final_weights(tmp_path / "data-parallel")
    half = gpu_check.one_process_combined_step(argv, ranks=1)
    assert gpu_check.max_weight_difference(launched, half) > gpu_check.DATA_PARALLEL_ATOL


@pytest.mark.parametrize(("losses", "expected"), [
    ({1: 10.0, 2: 9.0}, [0.0, 0.0]),
    ({1: 10.1, 2: 9.0}, [pytest.approx(0.01), 0.0]),
    ({1: float("nan"), 2: 9.0}, [float("inf"), 0.0]),
    ({1: 10.0}, [0.0, float("inf")]),  # a step missing
])
def test_relative_differences(losses, expected):
    assert gpu_check.relative_differences(losses, {1: 10.0, 2: 9.0}) == expected


# ---------------------------------------------------------------------------------------------------------------
# Each defect planted, with CPU stand-ins, and the row that catches it
# ---------------------------------------------------------------------------------------------------------------


def run_report(losses: list[float], skipped: tuple[int, ...] = ()) -> gpu_check.RunReport:
    return gpu_check.RunReport(dict(enumerate(losses, start=1)), frozenset(skipped))


LEARNING = [11.1, 10.9, 10.6, 10.3, 10.1, 9.9]  # what a working fp32 run reports (bert-tiny falls ~11%)


def test_learning_row_catches_an_update_that_changes_nothing_and_all_steps_skipped():
    fp32, fp16 = gpu_check.FP32, gpu_check.BY_NAME["fp16-O1"]
    assert gpu_check.learning_check(run_report(LEARNING), fp32)[1]
    assert not gpu_check.learning_check(run_report([11.1] * 6), fp32)[1]  # the weights never moved
    assert not gpu_check.learning_check(run_report([11.1, 11.0, 11.1, 11.05, 11.0, 11.05]), fp32)[1]  # 1e-4's drift
    assert gpu_check.learning_check(run_report(LEARNING, skipped=(1, 2, 3)), fp16)[1]  # the loss-scale search
    assert not gpu_check.learning_check(run_report([11.1] * 6, skipped=tuple(range(1, 7))), fp16)[1]
    assert not gpu_check.learning_check(run_report(LEARNING, skipped=tuple(range(1, 8))), fp16)[1]  # > 6 skipped
    assert not gpu_check.learning_check(run_report(LEARNING, skipped=(2,)), fp32)[1]  # fp32 never skips
    assert not gpu_check.learning_check(run_report([*LEARNING[:-1], float("nan")]), fp32)[1]


def test_step1_row_catches_amp_not_applied_and_a_broken_precision():
    reference = run_report(LEARNING)
    fp16 = gpu_check.BY_NAME["fp16-O1"]
    assert gpu_check.step1_comparison(run_report([11.1 * (1 + 3e-4), *LEARNING[1:]]), reference, fp16)[1]
    # AMP silently not applied: the loss is fp32's to the last bit (or to fp32's rounding).
    assert not gpu_check.step1_comparison(reference, reference, fp16)[1]
    assert not gpu_check.step1_comparison(run_report([11.1 * (1 + 1e-7), *LEARNING[1:]]), reference, fp16)[1]
    # A loss scale left in the loss, or a NaN.
    assert not gpu_check.step1_comparison(run_report([11.1 * 2**20, *LEARNING[1:]]), reference, fp16)[1]
    assert not gpu_check.step1_comparison(run_report([float("nan"), *LEARNING[1:]]), reference, fp16)[1]


def test_parity_rows_catch_a_wrong_padding_mask_and_cross_sample_attention(monkeypatch):
    """The CPU rows' own computation (attention_parity), with the mask of the SDPA path broken the two ways a
    backend's mask handling can break: padding keys attended, and packed samples attending to each other."""
    import paddle

    import modeling

    config = ROOT / "bert_configs" / "bert-tiny-uncased.json"
    tolerance = {case: spec[2] for case, spec in gpu_check.CPU_PARITY_CASES.items()}
    correct = gpu_check.attention_parity(config, gpus=0)
    assert all(correct[case] <= tolerance[case] for case in tolerance), correct
    real = modeling.BertModel._attention_input

    def broken(self, attention_mask, sample_ids):
        if self.use_cpu_kernels:  # the reference path keeps its mask
            return real(self, attention_mask, sample_ids)
        if sample_ids is None:
            return real(self, paddle.ones_like(attention_mask), None)  # padding keys attended
        return real(self, None, paddle.zeros_like(sample_ids))  # every token in one sample

    monkeypatch.setattr(modeling.BertModel, "_attention_input", broken)
    wrong = gpu_check.attention_parity(config, gpus=0)
    assert all(wrong[case] > 10 * tolerance[case] for case in tolerance), wrong


class FakeRuns(gpu_check.GpuCheck):
    """GpuCheck whose processes are replaced: run() writes what `outcome(label, argv)` returns into the log (and
    raises RowFailure for a non-zero status), as the real run() does."""

    def __init__(self, work, gpus, outcome):
        super().__init__(work, gpus=0, shared=work / "no-shared")
        self.gpus, self.outcome = gpus, outcome
        self.shards = {length: work / f"shards-{length}" for length in gpu_check.SEQUENCE_LENGTHS}

    def run(self, label, argv, precision=gpu_check.FP32):
        status, text = self.outcome(label, [str(arg) for arg in argv])
        self.log_file(label).write_text(text)
        if status:
            raise gpu_check.RowFailure(f"{label}: exit status {status}: {text.splitlines()[-1]}")


def test_resume_across_amp_levels_row_wants_the_one_line_error(tmp_path):
    message = "run_pretraining.py: error: ...: saved with --use-pure-fp16 (AMP O2: fp32 master weights ...)"
    assert FakeRuns(tmp_path, 1, lambda label, argv: (1, message)).resume_across_amp_levels()[1]
    # Planted: the resume goes ahead (no metadata check), or dies in Paddle's assert instead.
    assert not FakeRuns(tmp_path, 1, lambda label, argv: (0, "step 8/8")).resume_across_amp_levels()[1]
    assert not FakeRuns(tmp_path, 1, lambda label, argv: (1, "AssertionError: Optimizer set error, "
                                                             "linear_0.w_0_moment1_0 should in state dict")
                        ).resume_across_amp_levels()[1]


def test_affinity_row_wants_the_pinned_cpus(tmp_path):
    pinned = "Rank 0 of 1: CPUs [4, 5, 12, 13], 4 threads\nstep 1/1"
    assert FakeRuns(tmp_path, 1, lambda label, argv: (0, pinned)).cpu_affinity()[1]
    assert not FakeRuns(tmp_path, 1, lambda label, argv: (0, "Rank 0 of 1: CPUs not pinned, 8 threads")
                        ).cpu_affinity()[1]
    with pytest.raises(gpu_check.RowFailure, match="exit status 1"):  # e.g. a UUID-style CUDA_VISIBLE_DEVICES
        FakeRuns(tmp_path, 1, lambda label, argv: (1, "ValueError: invalid literal for int()")).cpu_affinity()


def write_report(folder: Path, losses: list[float], skipped: tuple[int, ...] = ()) -> None:
    from utils.dllog import DLLogger

    folder.mkdir(parents=True, exist_ok=True)
    logger = DLLogger(str(folder / "report.json"))
    for step, loss in enumerate(losses, start=1):
        if step in skipped:
            logger.log((0, step), {"skipped_update": 1, "loss": loss})
        logger.log((0, step), {"loss": loss})


@pytest.mark.parametrize(("losses", "skipped", "passes"), [
    ([11.1, 10.9, 10.8, 10.7], (1,), True),
    ([11.1, 11.1, 11.1, 11.1], (1, 2, 3, 4), False),  # every update skipped
    ([11.1, float("nan"), float("nan"), float("nan")], (), False),  # the weights went NaN
])
def test_data_parallel_gradient_merge_row(tmp_path, losses, skipped, passes):
    def outcome(label, argv):
        write_report(Path(argv[argv.index("--output-dir") + 1]), losses, skipped)
        return 0, "done"

    check = FakeRuns(tmp_path, 2, outcome)
    assert check.data_parallel_gradient_merge(gpu_check.BY_NAME["fp16-O2"])[1] == passes
