"""cpu_ops remembers a failed build: later processes warn once without running the compiler again, until the
compiler or the source changes; the compiler's own output never reaches the terminal."""

from __future__ import annotations

import pytest

from kernels import cpu_ops


@pytest.fixture
def broken_source(tmp_path, monkeypatch):
    """A source that cannot compile, and a private cache; load() starts afresh and is reset afterwards."""
    source = tmp_path / "cpu_ops.cc"
    source.write_text("#error no compiler today\n")
    monkeypatch.setattr(cpu_ops, "SOURCE", source)
    monkeypatch.setenv("PADDLEBERT_CACHE", str(tmp_path / "cache"))
    cpu_ops.load.cache_clear()
    yield source
    cpu_ops.load.cache_clear()


def load_again():
    cpu_ops.load.cache_clear()
    return cpu_ops.load()


def test_a_failed_build_is_tried_once_per_compiler_and_source(broken_source, monkeypatch, capfd):
    builds = []
    real_build = cpu_ops._build

    def counted_build(directory):
        builds.append(directory)
        return real_build(directory)

    monkeypatch.setattr(cpu_ops, "_build", counted_build)
    with pytest.warns(UserWarning, match="cpu_ops: cannot build cpu_ops.cc .*using Paddle's CPU ops"):
        assert load_again() is None
    captured = capfd.readouterr()
    assert "no compiler today" not in captured.out + captured.err  # the compiler's output went to its log
    assert len(builds) == 1
    record = cpu_ops.failure_record(cpu_ops.cache_directory())
    assert record.is_file()

    # The next process: one warning naming the record, and no build.
    with pytest.warns(UserWarning, match=r"failed to build before with this compiler \(.*\); using Paddle's CPU "
                      rf"ops \(delete {record} to retry\)") as warned:
        assert load_again() is None
    assert len(warned) == 1 and len(builds) == 1

    # Another compiler (installed, upgraded): tried again.
    identity = cpu_ops.compiler_identity()
    monkeypatch.setattr(cpu_ops, "compiler_identity", lambda: [*identity, ["g++-14", "/usr/bin/g++-14", 1, 2]])
    with pytest.warns(UserWarning, match="cpu_ops: cannot build"):
        assert load_again() is None
    assert len(builds) == 2

    # Another source: another cache directory, tried again.
    broken_source.write_text("#error still no compiler\n")
    with pytest.warns(UserWarning, match="cpu_ops: cannot build"):
        assert load_again() is None
    assert len(builds) == 3
