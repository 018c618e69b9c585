"""benchmarks/ab_bench.py on the CPU: the base copy (this tree with another revision's csrc) and the
summary table. Building and timing need nvcc and a GPU; the kernels' A/B figures come from
device runs (docs/performance.md)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

from benchmarks import ab_bench

REPO = pathlib.Path(__file__).resolve().parents[2]


def git_available() -> bool:
    if shutil.which("git") is None:
        return False
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode == 0


@pytest.mark.skipif(not git_available(), reason="needs a git checkout of the repository")
def test_base_copy_has_this_tree_and_the_revisions_csrc(tmp_path):
    target = ab_bench.copy_with_base_kernels("HEAD", tmp_path)
    assert (target / "setup.py").is_file() and (target / "python" / "fp4ops" / "__init__.py").is_file()
    assert not (target / ".git").exists() and not list((target / "python" / "fp4ops").glob("*.so"))
    committed = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", "HEAD", "csrc"],
                               capture_output=True, text=True, check=True).stdout.split()
    copied = sorted(str(p.relative_to(target)) for p in (target / "csrc").rglob("*") if p.is_file())
    assert copied == sorted(committed)
    header = "csrc/common/fp4_format.h"
    at_head = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{header}"], capture_output=True, check=True).stdout
    assert (target / header).read_bytes() == at_head


def test_base_copy_from_a_csrc_folder(tmp_path):
    """--base-csrc: the base side's kernels from a folder (a tree without git history)."""
    old = tmp_path / "old_csrc"
    shutil.copytree(REPO / "csrc", old)
    marker = old / "cuda" / "gemv_mma.cuh"
    marker.write_text(marker.read_text() + "\n// the base side's copy\n")
    target = ab_bench.copy_with_base_kernels(None, tmp_path / "work", base_csrc=old)
    assert (target / "csrc" / "cuda" / "gemv_mma.cuh").read_text().endswith("// the base side's copy\n")
    assert sorted(p.name for p in (target / "csrc").rglob("*")) == sorted(p.name for p in old.rglob("*"))
    assert (REPO / "csrc" / "cuda" / "gemv_mma.cuh").read_text() != marker.read_text()
    with pytest.raises(ValueError, match="exactly one"):
        ab_bench.copy_with_base_kernels("HEAD", tmp_path / "work", base_csrc=old)
    # An --also side lands beside base, under its own name, with its own kernels.
    also = ab_bench.copy_with_base_kernels(None, tmp_path / "work", base_csrc=old, side="staged")
    assert also == tmp_path / "work" / "staged" and also != target
    assert (also / "csrc" / "cuda" / "gemv_mma.cuh").read_text() == marker.read_text()


def test_base_csrc_must_be_a_csrc_folder(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ab_bench.main(["--base-csrc", str(tmp_path), "--work", str(tmp_path / "work"), "--", "--families", "amax"])
    assert "expected a csrc folder" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()  # refused before anything was created


def write_run(run_dir: pathlib.Path, rows: list[dict]) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "suite_ab.json").write_text(json.dumps({"rows": rows}))


def row(op, impl, family, numel, shape, pct, us, us_min, dtype="bfloat16"):
    return {"op": op, "impl": impl, "family": family, "numel": numel, "shape": shape, "pct": pct, "us": us,
            "us_min": us_min, "dtype": dtype}


def test_summary_keeps_large_fp4ops_rows_and_every_gemv_shape(tmp_path):
    runs = {"new1": tmp_path / "new1", "base1": tmp_path / "base1"}
    write_run(runs["new1"], [
        row("nvfp4 dequantize", "fp4ops", "dequantize", 2**26, [16384, 4096], 90.44, 44.7, 44.2),
        row("nvfp4 dequantize", "fp4ops", "dequantize", 2**24, [4096, 4096], 75.0, 13.0, 12.9),  # too small
        row("nvfp4 dequantize", "reference (eager)", "dequantize", 2**26, [16384, 4096], 3.0, 900.0, 890.0),
        row("gemv mxfp4 x mxfp4", "fp4ops", "gemv", 7168 * 2048 * 4, [7168, 2048, 4], 43.66, 16.9, 16.7, dtype="mxfp4 x mxfp4"),
    ])
    write_run(runs["base1"], [
        row("nvfp4 dequantize", "fp4ops", "dequantize", 2**26, [16384, 4096], 85.61, 47.1, 46.7),
    ])
    lines = ab_bench.summarize(runs).splitlines()
    assert lines[0] == "| op | dtype | size | new1 | base1 | new / base |"
    body = lines[2:]
    assert body == [
        "| gemv mxfp4 x mxfp4 | mxfp4 x mxfp4 | 7168 x 2048 x 4 | 43.7% (16.9 / 16.7) | - | - |",
        "| nvfp4 dequantize | bfloat16 | 2^26 | 90.4% (44.7 / 44.2) | 85.6% (47.1 / 46.7) | 1.054x |",
    ]


def test_summary_keeps_every_producer_shape_and_a_column_per_side(tmp_path):
    runs = {name: tmp_path / name for name in ("new1", "base1", "staged1", "new2", "base2", "staged2")}
    op = "rms_norm_quantize nvfp4 (scale given)"
    medians = {"new1": 11.0, "base1": 10.0, "staged1": 8.0, "new2": 10.5, "base2": 10.4, "staged2": 8.2}
    for name, us in medians.items():
        write_run(runs[name], [row(op, "fp4ops", "producers", 1024 * 4096, [1024, 4096], 23.5, us, us - 0.1)])
    lines = ab_bench.summarize(runs).splitlines()
    assert lines[0] == "| op | dtype | size | new1 | base1 | staged1 | new2 | base2 | staged2 | new / base | staged / base |"
    cells = lines[2].split(" | ")
    assert cells[:3] == ["| " + op, "bfloat16", "1024 x 4096"]
    # Fastest medians: new 10.5, base 10.0, staged 8.0.
    assert cells[-2:] == [f"{10.0 / 10.5:.3f}x", f"{10.0 / 8.0:.3f}x |"]


@pytest.mark.parametrize("spec", ["base=.", "new=.", "alt2=.", "alt=/nonexistent", "=."])
def test_also_rejects_bad_sides(tmp_path, spec):
    with pytest.raises(SystemExit):
        ab_bench.main(["--base", "HEAD", "--also", spec, "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")])


def test_rounds_must_be_positive(tmp_path):
    with pytest.raises(SystemExit):
        ab_bench.main(["--base", "HEAD", "--rounds", "0", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")])


def write_decode_run(run_dir: pathlib.Path, cases: list[tuple], llama: list[tuple] = (), w4a4: list[tuple] = ()) -> None:
    run_dir.mkdir(parents=True)
    rows = [{"n": n, "k": k, "format": fmt, "dtype": dtype, "rows": m, "fp4_us": us} for n, k, fmt, dtype, m, us in cases]
    stack = [{"format": fmt, "dtype": dtype, "rows": m, "fp4_tokens_per_s": rate} for fmt, dtype, m, rate in llama]
    layers = [{"format": fmt, "rows": m, "fp4_tokens_per_s": rate} for fmt, m, rate in w4a4]
    (run_dir / "decode_ab.json").write_text(json.dumps({"rows": rows, "llama": stack, "llama_w4a4": layers}))


def test_decode_summary_gives_each_runs_time_and_the_best_of_each_side(tmp_path):
    runs = {name: tmp_path / name for name in ["new1", "base1", "new2", "base2"]}
    write_decode_run(runs["new1"], [(4096, 4096, "mxfp4", "bfloat16", 16, 10.93), (4096, 4096, "nvfp4", "bfloat16", 1, 7.60)])
    write_decode_run(runs["base1"], [(4096, 4096, "mxfp4", "bfloat16", 16, 14.57), (4096, 4096, "nvfp4", "bfloat16", 1, 7.40)])
    write_decode_run(runs["new2"], [(4096, 4096, "mxfp4", "bfloat16", 16, 11.20), (4096, 4096, "nvfp4", "bfloat16", 1, 7.50)])
    write_decode_run(runs["base2"], [(4096, 4096, "mxfp4", "bfloat16", 16, 14.40)])  # a case missing on one run
    lines = ab_bench.summarize_decode(runs).splitlines()
    assert lines[0] == "| N x K | format | x | rows | new1 | base1 | new2 | base2 | new / base |"
    assert lines[2:] == [
        f"| 4096 x 4096 | mxfp4 | bfloat16 | 16 | 10.93 | 14.57 | 11.20 | 14.40 | {14.40 / 10.93:.3f}x |",
        f"| 4096 x 4096 | nvfp4 | bfloat16 | 1 | 7.60 | 7.40 | 7.50 | - | {7.40 / 7.50:.3f}x |",
    ]


def test_decode_summary_gives_the_llama_stacks_tokens_per_second_and_the_gain(tmp_path):
    runs = {name: tmp_path / name for name in ["new1", "base1", "new2", "base2"]}
    case = [(4096, 4096, "nvfp4", "bfloat16", 1, 7.60)]
    write_decode_run(runs["new1"], case, [("nvfp4", "bfloat16", 1, 415.2), ("mxfp4", "bfloat16", 16, 4290.0)])
    write_decode_run(runs["base1"], case, [("nvfp4", "bfloat16", 1, 408.0), ("mxfp4", "bfloat16", 16, 4298.4)])
    write_decode_run(runs["new2"], case, [("nvfp4", "bfloat16", 1, 414.6), ("mxfp4", "bfloat16", 16, 4303.0)])
    write_decode_run(runs["base2"], case, [("nvfp4", "bfloat16", 1, 409.0)])  # a batch missing on one run
    lines = ab_bench.summarize_decode(runs).splitlines()
    start = lines.index("Llama-3.1-8B stack, FP4 tokens/s:")
    assert lines[start + 2] == "| format | x | batch | new1 | base1 | new2 | base2 | new / base |"
    assert lines[start + 4:] == [
        f"| mxfp4 | bfloat16 | 16 | 4290 | 4298 | 4303 | - | {4303.0 / 4298.4:.3f}x |",
        f"| nvfp4 | bfloat16 | 1 | 415 | 408 | 415 | 409 | {415.2 / 409.0:.3f}x |",
    ]


def test_decode_summary_without_one_side(tmp_path):
    runs = {"new1": tmp_path / "new1"}
    write_decode_run(runs["new1"], [(1024, 8192, "nvfp4", "fp4", 8, 7.67)])
    assert ab_bench.summarize_decode(runs).splitlines()[2] == "| 1024 x 8192 | nvfp4 | fp4 | 8 | 7.67 | - |"


def test_bench_must_be_known(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ab_bench.main(["--base", "HEAD", "--bench", "gemm", "--work", str(tmp_path / "w")])
    assert "invalid choice" in capsys.readouterr().err


class FakeClock:
    """A clock that moves only when a fake run takes time."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_rounds_alternate_sides_and_rewrite_the_summary_after_each_run(tmp_path):
    trees = {"new": tmp_path / "n", "base": tmp_path / "b", "alt": tmp_path / "a"}
    ran, summaries = [], []
    runs = ab_bench.run_rounds(trees, 2, lambda tree, name: ran.append((tree.name, name)),
                               lambda done: summaries.append(list(done)), tmp_path)
    assert ran == [("n", "new1"), ("b", "base1"), ("a", "alt1"), ("n", "new2"), ("b", "base2"), ("a", "alt2")]
    assert list(runs) == ["new1", "base1", "alt1", "new2", "base2", "alt2"]
    assert runs["base2"] == tmp_path / "base2"
    assert summaries == [list(runs)[:i] for i in range(1, 7)]


def test_time_budget_starts_no_run_that_would_end_past_it(tmp_path):
    clock = FakeClock()
    durations = {"new1": 40.0, "base1": 50.0, "new2": 45.0, "base2": 40.0}

    def bench_one(tree, name):
        clock.now += durations[name]

    summaries = []
    # 30 s of build before the first run; after new1 and base1 (120 s gone, runs up to 50 s), new2
    # fits a 175 s budget (170 s) and base2 does not (165 s gone + 50 s).
    runs = ab_bench.run_rounds({"new": tmp_path, "base": tmp_path}, 2, bench_one, lambda done: summaries.append(list(done)),
                               tmp_path, time_budget=175.0, started=clock.now - 30.0, clock=clock)
    assert list(runs) == ["new1", "base1", "new2"]
    assert summaries[-1] == ["new1", "base1", "new2"]


def test_a_time_budget_spent_by_the_builds_is_an_error_not_an_empty_summary(tmp_path):
    clock = FakeClock()
    ran = []
    with pytest.raises(SystemExit, match=r"no run started: 135 s of the 130 s time budget"):
        ab_bench.run_rounds({"new": tmp_path, "base": tmp_path}, 2, lambda tree, name: ran.append(name), lambda done: None,
                            tmp_path, time_budget=130.0, started=clock.now - 135.0, clock=clock)
    assert ran == []


def test_a_failed_run_ends_the_ab_with_its_log_named_and_the_summary_written(tmp_path):
    def bench_one(tree, name):
        if name == "base1":
            raise subprocess.CalledProcessError(3, ["python", "-m", "benchmarks.suite"])

    summaries = []
    with pytest.raises(SystemExit, match=r"bench base1 failed \(exit status 3\): see .*base1\.log"):
        ab_bench.run_rounds({"new": tmp_path, "base": tmp_path}, 2, bench_one, lambda done: summaries.append(list(done)), tmp_path)
    assert summaries[-1] == ["new1"]


def test_time_budget_must_be_positive(tmp_path):
    with pytest.raises(SystemExit):
        ab_bench.main(["--base", "HEAD", "--time-budget", "0", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")])


def test_decode_summary_lists_the_w4a4_layers_beside_the_linears_stack(tmp_path):
    """The W4A4 layers with fused producers (decode_stream's llama_w4a4 rows, no x dtype of their
    own) come into the Llama table as x "fp4, layers", apart from the linears stack's FP4 x rows."""
    runs = {name: tmp_path / name for name in ["new1", "base1"]}
    case = [(4096, 4096, "nvfp4", "fp4", 1, 7.60)]
    write_decode_run(runs["new1"], case, [("nvfp4", "fp4", 1, 400.0)], [("nvfp4", 1, 250.0)])
    write_decode_run(runs["base1"], case, [("nvfp4", "fp4", 1, 390.0)], [("nvfp4", 1, 200.0)])
    lines = ab_bench.summarize_decode(runs).splitlines()
    start = lines.index("Llama-3.1-8B stack, FP4 tokens/s:")
    assert lines[start + 4:] == ["| nvfp4 | fp4 | 1 | 400 | 390 | 1.026x |", "| nvfp4 | fp4, layers | 1 | 250 | 200 | 1.250x |"]


@pytest.mark.parametrize("spec", ["base=FOO=1", "new=FOO=1", "alt2=FOO=1", "=FOO=1", "alt=FOO", "alt=1FOO=2", "alt=FOO=1,BAR"])
def test_env_rejects_bad_sides(tmp_path, spec):
    with pytest.raises(SystemExit):
        ab_bench.main(["--env", spec, "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")])


def test_env_and_also_sides_must_not_share_a_name(tmp_path):
    with pytest.raises(SystemExit):
        ab_bench.main(["--base", "HEAD", "--also", f"alt={REPO / 'csrc'}", "--env", "alt=FOO=1",
                       "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")])


def test_an_ab_needs_a_base_or_an_env_side(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ab_bench.main(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")])
    assert "--env" in capsys.readouterr().err


def test_also_needs_a_base_revision(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ab_bench.main(["--env", "carve=FOO=1", "--also", f"alt={REPO / 'csrc'}",
                       "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")])
    assert "--also needs" in capsys.readouterr().err


def test_env_sides_run_this_trees_one_build_with_their_variables(tmp_path, monkeypatch):
    built, ran = [], []
    monkeypatch.setattr(ab_bench, "build_both", lambda trees, out: built.append(dict(trees)))

    def fake_run(tree, bench_args, run_dir, bench="suite", extra_env=None):
        ran.append((tree, run_dir.name, extra_env, bench_args))
        write_decode_run(run_dir, [(4096, 4096, "nvfp4", "bfloat16", 1, 7.0 if extra_env else 7.7)])

    monkeypatch.setattr(ab_bench, "run_bench", fake_run)
    out = tmp_path / "out"
    ab_bench.main(["--env", "carve=FP4OPS_EXP_CARVEOUT=100", "--env", "pad=FP4OPS_EXP_SMEM_PAD=16384,OTHER=a=b",
                   "--bench", "decode", "--rounds", "2", "--out", str(out), "--work", str(tmp_path / "w"), "--", "--rows", "1"])
    assert built == [{"base": REPO}]
    carve, pad = {"FP4OPS_EXP_CARVEOUT": "100"}, {"FP4OPS_EXP_SMEM_PAD": "16384", "OTHER": "a=b"}
    assert ran == [(REPO, name, env, ["--rows", "1"]) for name, env in
                   [("base1", None), ("carve1", carve), ("pad1", pad), ("base2", None), ("carve2", carve), ("pad2", pad)]]
    lines = (out / "ab_summary.md").read_text().splitlines()
    assert lines[0].endswith("| carve / base | pad / base |")
    assert lines[2].endswith(f"| {7.7 / 7.0:.3f}x | {7.7 / 7.0:.3f}x |")


def test_env_sides_beside_a_base_revision_run_the_new_build(tmp_path, monkeypatch):
    built, ran = [], []
    monkeypatch.setattr(ab_bench, "revision_exists", lambda revision: True)  # no git needed
    monkeypatch.setattr(ab_bench, "copy_with_base_kernels", lambda base, work, base_csrc=None, side="base": tmp_path / side)
    monkeypatch.setattr(ab_bench, "build_both", lambda trees, out: built.append(dict(trees)))

    def fake_run(tree, bench_args, run_dir, bench="suite", extra_env=None):
        ran.append((tree, run_dir.name, extra_env))
        write_decode_run(run_dir, [])

    monkeypatch.setattr(ab_bench, "run_bench", fake_run)
    ab_bench.main(["--base", "HEAD", "--env", "carve=X=1", "--bench", "decode", "--rounds", "1",
                   "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")])
    assert built == [{"new": REPO, "base": tmp_path / "base"}]
    assert ran == [(REPO, "new1", None), (tmp_path / "base", "base1", None), (REPO, "carve1", {"X": "1"})]


def test_run_bench_adds_the_sides_variables_to_its_environment(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(ab_bench.subprocess, "run", lambda command, cwd, env, stdout, stderr, check: seen.update(env))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    ab_bench.run_bench(tmp_path, [], tmp_path / "run", "decode", {"FP4OPS_EXP_CARVEOUT": "100"})
    assert seen["FP4OPS_EXP_CARVEOUT"] == "100" and seen["PYTHONPATH"] == str(tmp_path / "python")


def test_plan_prints_the_sides_builds_and_runs_without_building(tmp_path, monkeypatch, capsys):
    """--plan checks the arguments as a run would, then says what it would do and stops: nothing
    copied, built or run, and no work folder made."""
    monkeypatch.setattr(ab_bench, "revision_exists", lambda revision: True)  # no git needed
    monkeypatch.setattr(ab_bench, "copy_with_base_kernels", lambda *a, **k: pytest.fail("copied a tree"))
    monkeypatch.setattr(ab_bench, "build_both", lambda *a, **k: pytest.fail("built"))
    monkeypatch.setattr(ab_bench, "run_bench", lambda *a, **k: pytest.fail("ran"))
    ab_bench.main(["--plan", "--base", "HEAD", "--also", f"staged={REPO / 'csrc'}", "--env", "carve=X=1,Y=2",
                   "--bench", "decode", "--rounds", "3", "--work", str(tmp_path / "w"), "--", "--rows", "1", "8"])
    text = capsys.readouterr().out
    assert not (tmp_path / "w").exists()
    assert "builds (3, at once): this tree; base (`git archive HEAD csrc`); staged (" in text
    sides = [line.split(":")[0].strip() for line in text.splitlines() if line.startswith("  ")]
    assert sides == ["new", "base", "staged", "carve"]
    assert "carve: this tree's build, with X=1 Y=2" in text
    assert "rounds: 3 (12 runs); each run: " in text and "-m benchmarks.decode_stream --rows 1 8 --out" in text
    assert "(the --env sides run the build of 'new')" in text


def test_an_unknown_base_revision_is_refused_before_any_build(tmp_path, capsys):
    """A revision this checkout's git lacks (a copied tree may have older history) fails at once,
    naming the way around it, rather than after the machine has started copying."""
    with pytest.raises(SystemExit):
        ab_bench.main(["--base", "0" * 40, "--work", str(tmp_path / "w"), "--bench", "decode"])
    error = capsys.readouterr().err
    assert "no such revision" in error and "--base-csrc" in error
    assert not (tmp_path / "w").exists()


def test_plan_rejects_what_a_run_would(tmp_path, capsys):
    """The checks come before --plan's exit: a side name ending in a digit is refused there too."""
    with pytest.raises(SystemExit):
        ab_bench.main(["--plan", "--base", "HEAD", "--also", f"v2={REPO / 'csrc'}", "--work", str(tmp_path / "w")])
    assert "not ending in a digit" in capsys.readouterr().err
    ab_bench.main(["--plan", "--env", "carve=X=1", "--bench", "decode"])
    text = capsys.readouterr().out
    assert "builds (1, at once): this tree" in text and "(the --env sides run the build of 'base')" in text


def write_patch(path: pathlib.Path, relative: str, before: str, after: str) -> pathlib.Path:
    """A unified diff of the file at `relative` (git's a/ b/ prefixes) from `before` to `after`."""
    import difflib

    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{relative}", tofile=f"b/{relative}")
    path.write_text("".join(lines))
    return path


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git (`git apply`)")
PATCHED = "csrc/cuda/gemv_mma.cuh"


@needs_git
def test_patch_side_is_this_tree_with_its_patches_applied_in_order(tmp_path):
    source = (REPO / PATCHED).read_text()
    first = write_patch(tmp_path / "first.patch", PATCHED, source, source + "// first\n")
    second = write_patch(tmp_path / "second.patch", PATCHED, source + "// first\n", source + "// first\n// second\n")
    assert ab_bench.patch_error([first, second]) is None
    target = ab_bench.copy_with_patches(tmp_path / "work", [first, second], "probe")
    assert target == tmp_path / "work" / "probe" and (target / "setup.py").is_file()
    assert (target / PATCHED).read_text() == source + "// first\n// second\n"
    assert (REPO / PATCHED).read_text() == source  # this tree untouched
    # The second alone does not apply to this tree; nor do the two the other way round.
    assert "does not apply" in ab_bench.patch_error([second])
    assert "does not apply" in ab_bench.patch_error([second, first])


@needs_git
def test_patch_must_change_csrc_only_and_exist(tmp_path):
    readme = "benchmarks/README.md"
    text = (REPO / readme).read_text()
    outside = write_patch(tmp_path / "outside.patch", readme, text, text + "more\n")
    assert "under csrc/ only" in ab_bench.patch_error([outside]) and readme in ab_bench.patch_error([outside])
    assert "no such file" in ab_bench.patch_error([tmp_path / "missing.patch"])
    (tmp_path / "empty.patch").write_text("not a diff\n")
    assert "not a patch" in ab_bench.patch_error([tmp_path / "empty.patch"])


@needs_git
def test_patch_sides_build_beside_this_tree_which_runs_as_base(tmp_path, monkeypatch, capsys):
    source = (REPO / PATCHED).read_text()
    patch = write_patch(tmp_path / "probe.patch", PATCHED, source, source + "// probe\n")
    built, ran = [], []
    monkeypatch.setattr(ab_bench, "copy_with_patches", lambda work, patches, side: tmp_path / side)
    monkeypatch.setattr(ab_bench, "build_both", lambda trees, out: built.append(dict(trees)))

    def fake_run(tree, bench_args, run_dir, bench="suite", extra_env=None):
        ran.append((tree, run_dir.name, extra_env))
        write_decode_run(run_dir, [(4096, 4096, "nvfp4", "bfloat16", 1, 6.0 if tree != REPO else 6.6)])

    monkeypatch.setattr(ab_bench, "run_bench", fake_run)
    out = tmp_path / "out"
    ab_bench.main(["--patch", f"probe={patch}", "--env", "carve=X=1", "--bench", "decode", "--rounds", "1",
                   "--out", str(out), "--work", str(tmp_path / "w")])
    assert built == [{"base": REPO, "probe": tmp_path / "probe"}]
    assert ran == [(REPO, "base1", None), (tmp_path / "probe", "probe1", None), (REPO, "carve1", {"X": "1"})]
    lines = (out / "ab_summary.md").read_text().splitlines()
    assert lines[0].endswith("| probe / base | carve / base |") and f"| {6.6 / 6.0:.3f}x |" in lines[2]
    # --plan checks that the files apply in order as a run would: the same patch twice does not.
    with pytest.raises(SystemExit):
        ab_bench.main(["--plan", "--patch", f"probe={patch},{patch}"])
    assert "does not apply" in capsys.readouterr().err
    ab_bench.main(["--plan", "--patch", f"probe={patch}", "--bench", "decode"])
    text = capsys.readouterr().out
    assert f"probe: this tree with {patch} applied" in text and f"probe (this tree + {patch})" in text


@pytest.mark.parametrize("spec", ["base=x.patch", "probe2=x.patch", "probe=", "=x.patch"])
def test_patch_rejects_bad_sides(tmp_path, spec):
    with pytest.raises(SystemExit):
        ab_bench.main(["--patch", spec, "--plan"])
