"""The benchmark suite's code (benchmarks.suite) on the CPU: a tiny run end to end (every output check,
the JSON, the Markdown, the plots), the check that stops a run on a wrong fp4ops output, the fused
producers' rows, bytes and checks, the targets' arithmetic and the README update. The suite's
numbers come from GPU runs; none of these tests time anything."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

from benchmarks.suite import main, report, targets  # noqa: E402
from benchmarks.suite.cases import PRODUCERS, Case, Rotation, producer_cases, weight_copies  # noqa: E402
from benchmarks.suite.harness import MEDIAN_LIMIT, MEDIAN_RULE_MIN_US, SPREAD_LIMIT, SPREAD_RETRIES, Timer, Timing, disturbed  # noqa: E402
from benchmarks.suite.runner import CheckFailed, measure  # noqa: E402


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    main(["--device", "cpu", "--sizes", "18", "--dtypes", "bfloat16", "float32", "--reps", "2", "--no-compile",
          "--families", "amax", "nvfp4 quantize", "mxfp4 quantize", "dequantize", "casts", "gemv", "producers",
          "--gemv-shapes", "48,256,2", "--producer-shapes", "1,256", "256,1024", "--out", str(out), "--tag", "test"])
    with open(out / "suite_test.json") as f:
        return out, json.load(f)


def test_cpu_run_checks_every_fp4ops_row(cpu_run):
    _, result = cpu_run
    ours = [r for r in result["rows"] if r["impl"] == "fp4ops"]
    # 9 element-wise ops x (3 decode shapes + 2 dtypes at 2^18) + 4 GEMV kinds + (7 producers + 3 plain
    # quantizers) x 2 shapes
    assert len(ours) == 9 * 5 + 4 + 10 * 2
    for r in ours:
        assert r["us"] > 0 and r["check"].startswith(("bitwise ==", "within SPEC 5")), r


def test_cpu_run_compares_the_eager_reference(cpu_run):
    _, result = cpu_run
    eager = [r for r in result["rows"] if r["impl"] == "reference (eager)"]
    assert eager and all(r["check"] == "bitwise == fp4ops (sampled rows)" for r in eager)
    skipped = [r for r in result["rows"] if r["impl"] == "reference (torch.compile)"]
    assert skipped and all(r["skip"] == "torch.compile baselines not asked for" for r in skipped)


def test_cpu_run_writes_report_and_plots(cpu_run):
    out, result = cpu_run
    text = (out / "suite_test.md").read_text()
    assert "## Targets\n" in text and "nvfp4 quantize (own amax)" in text
    assert "## Fused producers against the unfused sequence and the plain quantizer\n" in text
    for family in ("amax", "nvfp4_quantize", "mxfp4_quantize", "dequantize", "casts", "gemv", "producers"):
        assert (out / f"suite_test_{family}.png").stat().st_size > 1000


def test_cpu_run_times_each_producer_against_unfused_and_plain(cpu_run):
    _, result = cpu_run
    producers = [r for r in result["rows"] if r["family"] == "producers"]
    for shape in ([1, 256], [256, 1024]):
        for p in PRODUCERS:
            rows = {r["impl"]: r for r in producers if r["op"] == p.op and r["shape"] == shape}
            assert "intermediate" in rows["fp4ops"]["check"], rows
            unfused = [r for impl, r in rows.items() if impl.startswith("unfused")]
            assert len(unfused) == 1 and unfused[0]["us"] > 0 and unfused[0]["bytes"] == rows["fp4ops"]["bytes"]
            assert any(r["op"] == p.plain and r["shape"] == shape and r["us"] > 0 for r in producers)
    assert all(r["shape"] in ([1, 256], [256, 1024]) for r in producers)


def test_producer_bytes_per_element():
    """docs/performance.md's convention on bf16 input: each tensor once, the own amax a second read."""
    got = {p.op: p.bytes_per_element(2) for p in PRODUCERS}
    assert got == {"rms_norm_quantize nvfp4 (scale given)": 2.5625,
                   "rms_norm_quantize nvfp4 + residual (scale given)": 6.5625,  # + residual read, new one written
                   "rms_norm_quantize nvfp4 (own amax)": 4.5625,
                   "rms_norm_quantize mxfp4 (floor)": 2.53125,
                   "silu_mul_quantize nvfp4 (scale given)": 4.5625,  # gate and up per output element
                   "silu_mul_quantize nvfp4 (own amax)": 8.5625,
                   "silu_mul_quantize mxfp4 (floor)": 4.53125}


def test_producer_checks_catch_a_wrong_output():
    """Each producer's check passes on the op's output and stops on one flipped code (row 0 is
    always sampled), and on a wrong new residual."""
    cases = [c for c in producer_cases(8, 256, torch.device("cpu"), None) if c.op in {p.op for p in PRODUCERS}]
    assert len(cases) == len(PRODUCERS)
    for case in cases:
        out = case.fn()
        assert case.check(out).startswith("bitwise ==")
        q = out[0] if isinstance(out, tuple) else out
        q.data[0, 0] ^= 1
        with pytest.raises(AssertionError, match="codes or scales"):
            case.check(out)
        if isinstance(out, tuple):
            out = case.fn()
            out[1][0, 0] += 1
            with pytest.raises(AssertionError, match="new residual"):
                case.check(out)


def test_wrong_fp4ops_output_stops_the_run():
    x = torch.randn(4, 32)

    def exact_amax(out) -> str:
        if not torch.equal(out, x.abs().amax()):
            raise AssertionError("amax")
        return "bitwise"

    case = Case("amax", "amax", "fp4ops", "float32", (4, 32), 128, 512.0, "read", fn=lambda: x.abs().amax() + 1,
                check=exact_amax)
    with pytest.raises(CheckFailed, match="fp4ops output differs"):
        measure(case, Timer(torch.device("cpu"), reps=2), {"copy": 1.0, "read": 1.0})


def test_failing_baseline_loses_only_its_row():
    def broken():
        raise RuntimeError("out of memory")

    case = Case("amax", "amax", "reference (eager)", "float32", (4, 32), 128, 512.0, "read", fn=broken)
    row = measure(case, Timer(torch.device("cpu"), reps=2), {"copy": 1.0, "read": 1.0})
    assert row["skip"] == "failed: RuntimeError: out of memory" and "us" not in row


def test_disturbed_spreads():
    assert not disturbed(Timing(us=101.0, output=None, us_min=100.0, us_p90=103.0))
    assert disturbed(Timing(us=100.0 * MEDIAN_LIMIT + 0.5, output=None, us_min=100.0, us_p90=140.0))  # median
    assert disturbed(Timing(us=101.0, output=None, us_min=100.0, us_p90=100.0 * SPREAD_LIMIT + 1))  # tail
    short = MEDIAN_RULE_MIN_US / 2  # microsecond calls jitter: only the tail rule applies to them
    assert not disturbed(Timing(us=short * 1.2, output=None, us_min=short, us_p90=short * 1.5))


class _ScriptedTimer(Timer):
    """A CUDA timer without a GPU: each cold attempt returns the next scripted timing."""

    def __init__(self, attempts):
        super().__init__(torch.device("cpu"), reps=3)
        self.cuda = True
        self.attempts = list(attempts)

    def _sync(self):
        pass

    def _cold_attempt(self, fn, reps):
        return self.attempts.pop(0)


def _timing(median, fastest=100.0, p90=None):
    return Timing(us=median, output=None, us_min=fastest, us_p90=p90 or median * 1.02)


def test_cold_retimes_a_disturbed_row_and_keeps_the_smallest_median():
    timer = _ScriptedTimer([_timing(116.0), _timing(101.0), _timing(130.0)])
    best = timer.cold(lambda: None)
    assert (best.us, best.retries) == (101.0, 1) and len(timer.attempts) == 1  # stopped at the clean attempt


def test_cold_gives_up_after_the_retries():
    timer = _ScriptedTimer([_timing(120.0), _timing(118.0)] + [_timing(125.0)] * (SPREAD_RETRIES - 1))
    best = timer.cold(lambda: None)
    assert (best.us, best.retries) == (118.0, SPREAD_RETRIES) and not timer.attempts


def test_cold_times_a_clean_row_once():
    timer = _ScriptedTimer([_timing(101.0), _timing(99.0)])
    assert timer.cold(lambda: None).us == 101.0 and len(timer.attempts) == 1


def _row(op, impl, us, pct=50.0, numel=1 << 26, dtype="bfloat16", family="x", shape=(16384, 4096)):
    return {"family": family, "op": op, "impl": impl, "dtype": dtype, "shape": list(shape), "numel": numel,
            "us": us, "pct": pct, "ceiling": "copy", "launches": 1, "us_graph": None}


def test_targets_arithmetic():
    rows = [_row("amax", "fp4ops", 10.0, pct=96.0), _row("nvfp4 quantize (scale given)", "fp4ops", 20.0, pct=91.0),
            _row("nvfp4 quantize (own amax)", "fp4ops", 31.6), _row("nvfp4 quantize (own amax)", "fp4ops", 3.0,
                                                                      numel=4096, shape=(1, 4096)),
            _row("nvfp4 quantize (scale given)", "torch bf16->fp8 cast", 25.0),
            _row("nvfp4 quantize (scale given)", "reference (torch.compile)", 29.0)]
    got = {t.name: t for t in targets.evaluate({"rows": rows})}
    assert got["amax, % of read"].met is True
    assert got["NVFP4 quantize (scale given), % of copy"].met is True
    assert got["MXFP4 quantize (floor and rceil), % of copy"].met is None  # nothing measured is not a pass
    fused = got["NVFP4 quantize, own amax: time / (amax + quantize)"]
    assert fused.measured == "1.053" and fused.met is False  # 31.6 / 30
    assert got["1 x 4096 NVFP4 quantize, own amax"].met is True
    assert got["NVFP4 quantize vs PyTorch's fp8 cast (speed-up)"].measured == "1.25x"
    compiled = got["every op vs torch.compile of the reference (speed-up)"]
    assert compiled.measured == "1.45x" and compiled.met is False


def test_producer_targets_against_the_plain_quantizer_and_the_unfused_sequence():
    op = "rms_norm_quantize nvfp4 + residual (scale given)"
    big = dict(family="producers", numel=8192 * 8192, shape=(8192, 8192))
    rows = [{**_row(op, "fp4ops", 100.0, pct=88.0), **big},
            {**_row(op, "unfused: torch add + rms_norm, fp4ops quantize", 190.0), **big},
            {**_row("plain nvfp4 quantize (scale given)", "fp4ops", 40.0, pct=92.0), **big},
            # decode rows are reported, not judged (the targets' sizes are 2^26 and 2^28)
            {**_row(op, "fp4ops", 5.0, pct=1.0), "family": "producers", "numel": 4096, "shape": [1, 4096]},
            {**_row(op, "unfused: torch add + rms_norm, fp4ops quantize", 6.0), "family": "producers", "numel": 4096,
             "shape": [1, 4096]}]
    got = {t.name: t for t in targets.evaluate({"rows": rows})}
    plain = got["fused producers: the plain quantizer's % of copy / the producer's"]
    assert plain.measured == "1.045 (88.0% vs 92.0% of copy; time 2.50x)" and plain.met is True  # 92 / 88
    assert plain.worst == f"{op}, bfloat16, 8192 x 8192"
    unfused = got["fused producers vs the unfused sequence (speed-up)"]
    assert unfused.measured == "1.90x" and unfused.met is True
    rows[1]["us"] = 170.0
    assert {t.name: t for t in targets.evaluate({"rows": rows})}[unfused.name].met is False  # 1.7x
    alone = {t.name: t for t in targets.evaluate({"rows": rows[:1]})}
    assert alone[plain.name].met is None and alone[unfused.name].met is None  # nothing to compare: not a pass
    table = report.producers_table({"rows": rows})
    assert "1.20x" in table and "1 x 4096" in table and "92.0%" in table


def test_gemv_target_is_a_share_of_the_same_runs_read_of_its_bytes():
    seed = dict(family="gemv", numel=7168 * 2048 * 4, shape=(7168, 2048, 4), dtype="nvfp4 x bf16")
    gemv = {**_row("gemv nvfp4 x bf16", "fp4ops", 20.0, pct=60.0), **seed}
    reads = [{**_row("gemv nvfp4 x bf16", f"read of the same bytes ({kind})", us, pct=pct), **seed}
             for kind, us, pct in (("torch.amax", 18.0, 75.0), ("fp4ops amax", 19.5, 66.0))]
    got = {t.name: t for t in targets.evaluate({"rows": [gemv, *reads]})}
    target = got["GEMV one cold call, % of a same-run read of its bytes"]
    assert target.measured == "80.0% (60.0% of copy)" and target.met is False  # against the faster read: 60 / 75
    fast = {**gemv, "pct": 72.0}
    target = {t.name: t for t in targets.evaluate({"rows": [fast, *reads]})}["GEMV one cold call, % of a same-run read of its bytes"]
    assert target.met is True
    alone = {t.name: t for t in targets.evaluate({"rows": [gemv]})}["GEMV one cold call, % of a same-run read of its bytes"]
    assert alone.met is None  # no read of its bytes measured: not a pass


def test_rotation_takes_inputs_in_turn_and_remembers_the_last():
    calls = Rotation(["a", "b", "c"], lambda x: x.upper())
    assert [calls() for _ in range(4)] == ["A", "B", "C", "A"] and calls.last == "a"
    assert weight_copies(1e6, torch.device("cpu")) == 1


def test_update_readme_between_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.README_BEGIN}\nold\n{report.README_END}\nrest\n")
    report.update_readme(str(readme), "| new |")
    assert readme.read_text() == f"intro\n{report.README_BEGIN}\n| new |\n{report.README_END}\nrest\n"
    (tmp_path / "bare.md").write_text("no markers")
    with pytest.raises(ValueError, match="markers"):
        report.update_readme(str(tmp_path / "bare.md"), "x")


def test_gpu_tag():
    assert report.gpu_tag({"banner": {"gpu": "NVIDIA H100 80GB HBM3"}}) == "h100"
    assert report.gpu_tag({"banner": {"gpu": "NVIDIA H200"}}) == "h200"
    assert report.gpu_tag({"banner": {"gpu": "cpu"}}) == "cpu"


def test_merge_by_gpu_joins_parts_of_one_gpu():
    def res(gpu, rows, commit="a"):
        return {"banner": {"gpu": gpu, "commit": commit, "torch": "t", "cuda": "c"},
                "ceilings_GBps": {"copy": 1.0, "read": 1.0}, "rows": rows}

    merged = report.merge_by_gpu([res("H100", [1]), res("H200", [2]), res("H100", [3], "b")])
    assert [m["banner"]["gpu"] for m in merged] == ["H100", "H200"]
    assert merged[0]["rows"] == [1, 3] and [p["commit"] for p in merged[0]["parts"]] == ["a", "b"]
    assert "2 run(s)" in report.heading(merged[0])


def test_a_saved_merge_keeps_its_parts():
    """A family re-run merged into a saved suite file, then rendered (or merged again), still
    lists every run it came from."""
    def res(rows, commit):
        return {"banner": {"gpu": "H100", "commit": commit, "torch": "t", "cuda": "c"},
                "ceilings_GBps": {"copy": 1.0, "read": 1.0}, "rows": rows}

    saved = report.merge_by_gpu([res([1], "a"), res([2], "b")])[0]
    again = report.merge_by_gpu([saved, res([3], "c")])[0]
    assert again["rows"] == [1, 2, 3] and [p["commit"] for p in again["parts"]] == ["a", "b", "c"]
    assert "3 run(s)" in report.heading(again)


def test_shape_arguments_are_checked():
    with pytest.raises(SystemExit, match="--producer-shapes: expected ROWS,H"):
        main(["--device", "cpu", "--families", "producers", "--producer-shapes", "8,256,2"])
    with pytest.raises(SystemExit, match="--gemv-shapes: expected M,K,L"):
        main(["--device", "cpu", "--families", "gemv", "--gemv-shapes", "48,x,2"])


def test_the_documented_command_runs_from_the_repository_root():
    """`python -m benchmarks.suite` is the suite's one command (benchmarks/README.md)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "benchmarks.suite", "--help"], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m benchmarks.suite") and "--families" in done.stdout


def test_banner_commit_names_changes_to_tracked_files(tmp_path, monkeypatch):
    """HEAD's short hash, "+changes" once a tracked file differs from it (untracked files do not
    count), and FP4OPS_GIT_COMMIT over both."""
    from benchmarks.suite.harness import git_commit

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "kernel.cu").write_text("// one\n")
    git("add", "kernel.cu")
    git("commit", "-q", "-m", "first")
    head = git("rev-parse", "--short", "HEAD")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FP4OPS_GIT_COMMIT", raising=False)
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert git_commit() == head
    (tmp_path / "kernel.cu").write_text("// two\n")
    assert git_commit() == head + "+changes"
    monkeypatch.setenv("FP4OPS_GIT_COMMIT", "abc1234")
    assert git_commit() == "abc1234"
