"""benchmarks/k_range_sweep.py on the CPU: the knob it puts into a copy of linear.cu (compiled and run
with the host compiler where there is one), the A/B command and the tables of a sweep's runs. The
sweep itself needs nvcc and a GPU."""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import subprocess

import pytest

from benchmarks import k_range_sweep

REPO = pathlib.Path(__file__).resolve().parents[2]
LINEAR_CU = (REPO / "csrc" / "cuda" / "linear.cu").read_text()


def test_the_knob_goes_into_linear_splits_once():
    patched = k_range_sweep.with_knob(LINEAR_CU)
    assert patched.count("FP4OPS_EXP_SPLITS") == 1 and patched.count("#include <cstdlib>") == 1
    assert patched.index(k_range_sweep.KNOB_ANCHOR) < patched.index("FP4OPS_EXP_SPLITS")
    assert patched.replace(k_range_sweep.KNOB, "").replace("#include <cstdlib>\n", "") == LINEAR_CU


def test_a_moved_anchor_is_named():
    with pytest.raises(ValueError, match="linear_splits"):
        k_range_sweep.with_knob(LINEAR_CU.replace(k_range_sweep.KNOB_ANCHOR, "int linear_splits(int64_t n, int64_t k) {\n"))


def linear_splits_program(source: str) -> str:
    """A C++ program printing linear_splits(n, steps) for each 'n steps' pair on stdin, the function
    cut from `source` (linear.cu's text) with the one constant it reads from elsewhere."""
    begin = source.index(k_range_sweep.KNOB_ANCHOR)
    end = source.index("\n}\n", begin) + 3
    return ("#include <algorithm>\n#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n"
            "constexpr int64_t kLinearTileRows = 16;\n" + source[begin:end]
            + "int main() { long n, s; while (std::scanf(\"%ld %ld\", &n, &s) == 2) std::printf(\"%d\\n\", "
              "linear_splits(n, s)); }\n")


def compiled(tmp_path: pathlib.Path, name: str, source: str) -> pathlib.Path:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("needs a host C++ compiler")
    program = tmp_path / f"{name}.cpp"
    program.write_text(linear_splits_program(source))
    binary = tmp_path / name
    subprocess.run([compiler, "-std=c++17", "-O1", str(program), "-o", str(binary)], check=True)
    return binary


def counts_of(binary: pathlib.Path, pairs: list[tuple[int, int]], env: dict[str, str]) -> list[int]:
    stdin = "".join(f"{n} {steps}\n" for n, steps in pairs)
    run = subprocess.run([str(binary)], input=stdin, capture_output=True, text=True, check=True, env=env)
    return [int(line) for line in run.stdout.split()]


def test_the_knob_forces_the_count_and_otherwise_leaves_the_rule(tmp_path):
    """The knob's linear_splits, built by the host compiler: unset (or below 1) it returns the
    rule's count for every weight; set to C it returns min(C, steps)."""
    rule = compiled(tmp_path, "rule", LINEAR_CU)
    knob = compiled(tmp_path, "knob", k_range_sweep.with_knob(LINEAR_CU))
    pairs = [(random.randrange(1, 1 << 17), random.randrange(1, 900)) for _ in range(3000)]
    pairs += [(16, 1), (4096, 32), (28672, 64), (5120, 172), (131072, 576)]
    env = {key: value for key, value in os.environ.items() if key != "FP4OPS_EXP_SPLITS"}
    expected = counts_of(rule, pairs, env)
    assert counts_of(knob, pairs, env) == expected
    assert counts_of(knob, pairs, {**env, "FP4OPS_EXP_SPLITS": "0"}) == expected
    forced = random.randrange(2, 40)
    assert counts_of(knob, pairs, {**env, "FP4OPS_EXP_SPLITS": str(forced)}) == [min(forced, s) for _, s in pairs]


def test_the_ab_command_has_one_side_a_count():
    tree = pathlib.Path("/tree")
    command = k_range_sweep.ab_command(tree, [1, 3, 16], 2, pathlib.Path("/out"), 300.0,
                                       ["--shapes", "4096,4096", "--no-llama"], plan=True)
    assert command[1] == str(tree / "benchmarks" / "ab_bench.py")
    assert [command[i + 1] for i, arg in enumerate(command) if arg == "--env"] == [
        "ranges1_=FP4OPS_EXP_SPLITS=1", "ranges3_=FP4OPS_EXP_SPLITS=3", "ranges16_=FP4OPS_EXP_SPLITS=16"]
    assert command[command.index("--rounds") + 1] == "2" and command[command.index("--time-budget") + 1] == "300.0"
    dashes = command.index("--")
    assert "--plan" in command[:dashes] and command[command.index("--bench") + 1] == "decode"
    assert command[dashes + 1:] == ["--shapes", "4096,4096", "--no-llama", "--fp4-only"]


@pytest.mark.parametrize("count", [1, 7, 28])
def test_side_names_round_trip_and_take_a_round(count):
    name = k_range_sweep.side_name(count)
    assert k_range_sweep.count_of(name) == count and name.isidentifier() and not name[-1].isdigit()
    assert k_range_sweep.count_of("base") is None and k_range_sweep.count_of("new") is None


def write_run(out: pathlib.Path, run: str, rows: list[dict]) -> None:
    (out / run).mkdir(parents=True)
    (out / run / "decode_ab.json").write_text(json.dumps({"rows": rows}))


def layer(n: int, k: int, rows: int, us: float, fmt: str = "nvfp4") -> dict:
    return {"n": n, "k": k, "format": fmt, "dtype": "bfloat16", "rows": rows, "fp4_us": us}


def test_tables_and_plot_of_a_sweep(tmp_path):
    """Two rounds of the rule and three counts on a 1024 x 512 weight (4 steps): each side's fastest
    run, each count's time over the rule's, the count past the steps shown as the steps (its
    fastest), and sides that are neither ignored."""
    base_us = {1: random.uniform(5, 9), 8: random.uniform(9, 14)}
    forced_us = {count: {rows: random.uniform(4, 15) for rows in base_us} for count in (1, 2, 4, 64)}
    for round_index in (1, 2):
        slower = 1.0 if round_index == 1 else 1.5  # the second round slower: the first is the fastest
        write_run(tmp_path, f"base{round_index}", [layer(1024, 512, r, us * slower) for r, us in base_us.items()])
        for count, by_rows in forced_us.items():
            write_run(tmp_path, f"ranges{count}_{round_index}",
                      [layer(1024, 512, r, us * slower) for r, us in by_rows.items()])
    write_run(tmp_path, "new1", [layer(1024, 512, r, 1.0) for r in base_us])
    tables = k_range_sweep.sweep_tables(k_range_sweep.fastest_times(tmp_path))
    assert list(tables) == [(1024, 512, "nvfp4", "bfloat16")]
    by_rows = tables[(1024, 512, "nvfp4", "bfloat16")]
    for rows, ratios in by_rows.items():
        assert sorted(ratios) == [1, 2, 4]
        assert ratios[1] == forced_us[1][rows] / base_us[rows] and ratios[2] == forced_us[2][rows] / base_us[rows]
        assert ratios[4] == min(forced_us[4][rows], forced_us[64][rows]) / base_us[rows]
    markdown, plot = k_range_sweep.render(tmp_path)
    text = markdown.read_text()
    assert "## 1024 x 512, nvfp4, x bfloat16 (4 steps of 128)" in text
    assert f"| 8 | {base_us[8]:.2f} | {by_rows[8][1]:.3f} | {by_rows[8][2]:.3f} | {by_rows[8][4]:.3f} |" in text
    assert plot.stat().st_size > 0


def test_render_without_runs_says_so(tmp_path):
    write_run(tmp_path, "new1", [layer(1024, 512, 1, 3.0)])
    with pytest.raises(SystemExit, match="no decode runs"):
        k_range_sweep.render(tmp_path)


def test_plan_prints_the_sides_without_building(tmp_path, capfd):
    """--plan: the copy with the knob is made and its ab_bench.py prints the sides; nothing builds."""
    k_range_sweep.main(["--plan", "--work", str(tmp_path), "--counts", "2", "5", "--", "--shapes", "4096,4096"])
    printed = capfd.readouterr().out
    assert "ranges2_: this tree's build, with FP4OPS_EXP_SPLITS=2" in printed and "ranges5_" in printed
    assert "builds (1, at once): this tree" in printed
    assert "FP4OPS_EXP_SPLITS" in (tmp_path / "sweep" / "csrc" / "cuda" / "linear.cu").read_text()
    assert not list((tmp_path / "sweep").rglob("*.so"))
