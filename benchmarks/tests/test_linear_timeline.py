"""benchmarks/linear_timeline.py on the CPU: the grouping of a profile's kernels into layers and the
split of each layer's period. Profiling a graph needs a GPU; these feed it kernel timelines made up
here, random where the arithmetic allows."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from benchmarks import linear_timeline as tl

MAIN = "void fp4ops::cuda::linear_mma_kernel<fp4ops::Nvfp4Format, __nv_bfloat16, 1, true, false>(fp4ops::cuda::LinearArgs)"
WGMMA = "void fp4ops::cuda::linear_wgmma_kernel<fp4ops::Nvfp4Format, __nv_bfloat16, 8, false>(fp4ops::cuda::LinearArgs)"
REDUCE = "fp4ops::cuda::linear_reduce_kernel(fp4ops::cuda::LinearArgs)"
IMAGE = "void fp4ops::cuda::linear_wgmma_x_image_kernel<__nv_bfloat16>(uint4 const*, fp4ops::cuda::WgmmaXImage)"


def test_roles():
    assert tl.role(MAIN) == tl.role(WGMMA) == "main"
    assert tl.role(REDUCE) == "reduce" and tl.role("fp4ops::cuda::linear_reduce4_kernel(fp4ops::cuda::LinearArgs)") == "reduce"
    assert tl.role(IMAGE) == "prep"
    assert tl.role("void at::native::vectorized_elementwise_kernel<4, ...>") is None


def random_layers(count: int, rng: random.Random, with_prep: bool, with_reduce: bool) -> tuple[list, list]:
    """Kernels of `count` layers with random durations and overlaps, and each layer's phases as built.
    Each kernel ends after the one launched before it, which it waits for (launch_order)."""
    kernels, expected, t, last_end = [], [], 0.0, 0.0
    for _ in range(count):
        first = t
        prep = rng.uniform(0.5, 2.0) if with_prep else 0.0
        if with_prep:
            kernels.append(tl.Kernel(IMAGE, t, max(t + prep * rng.uniform(0.3, 1.0), last_end + 0.01)))
        main_start = t + prep
        main = rng.uniform(2.0, 20.0)
        kernels.append(tl.Kernel(WGMMA if with_prep else MAIN, main_start, main_start + main))
        end = main_start + main
        tail, last_start = 0.0, main_start
        if with_reduce:
            tail = rng.uniform(0.3, 3.0)
            # programmatic dependent launch: the reduction starts before the MMA kernel ends
            last_start = main_start + main * rng.uniform(0.2, 0.9)
            kernels.append(tl.Kernel(REDUCE, last_start, end + tail))
        # The next layer's first kernel starts after this layer's last one did (it is launched as
        # that kernel's dependent), maybe before that one ends.
        t = max(end + tail + rng.uniform(-1.0, 1.5), last_start + 0.01)
        last_end = end + tail
        expected.append({"prep": prep, "main": main, "reduce_tail": tail, "handoff": t - (end + tail), "period": t - first})
    return kernels, expected


@pytest.mark.parametrize("with_prep", [False, True])
@pytest.mark.parametrize("with_reduce", [False, True])
def test_phases_add_up_and_match_the_timeline(with_prep, with_reduce):
    rng = random.Random()
    kernels, expected = random_layers(rng.randint(2, 12), rng, with_prep, with_reduce)
    rng.shuffle(kernels)  # the profiler's order is not the launch order
    phases = tl.layer_phases(tl.layers_of(kernels))
    assert len(phases) == len(expected) - 1  # the last layer has no successor
    for got, want in zip(phases, expected):
        for name in tl.PHASES:
            assert got[name] == pytest.approx(want[name], abs=1e-9), name
        assert got["prep"] + got["main"] + got["reduce_tail"] + got["handoff"] == pytest.approx(got["period"])


def test_median_phases():
    phases = [{name: float(i) for name in tl.PHASES} for i in (3, 1, 2)]
    assert tl.median_phases(phases) == {name: 2.0 for name in tl.PHASES}


def test_malformed_timelines_are_refused():
    with pytest.raises(ValueError, match="reduction without"):
        tl.layers_of([tl.Kernel(REDUCE, 0.0, 1.0)])
    with pytest.raises(ValueError, match="reduction without"):
        tl.layers_of([tl.Kernel(MAIN, 0.0, 1.0), tl.Kernel(REDUCE, 0.5, 2.0), tl.Kernel(REDUCE, 1.5, 3.0)])
    with pytest.raises(ValueError, match="after the last MMA kernel"):
        tl.layers_of([tl.Kernel(MAIN, 0.0, 1.0), tl.Kernel(IMAGE, 2.0, 3.0)])


def test_markdown_lists_every_row():
    row = {"n": 4096, "k": 4096, "format": "nvfp4", "rows": 1, "layers": 12, "kernels": ["main", "reduce"],
           **{f"{name}_us": 1.5 for name in tl.PHASES}, "unprofiled_us": 1.25}
    text = tl.markdown({"banner_line": "GPU | torch | commit", "rows": [row, {**row, "rows": 16}]})
    assert text.count("| 4096 x 4096 |") == 2 and "reduce tail us" in text and "1.25" in text


def test_without_a_gpu_it_says_so(capsys, monkeypatch):
    monkeypatch.setattr(tl.torch.cuda, "is_available", lambda: False)
    assert tl.main([]) is None
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_formats_are_one_or_several():
    assert tl.parse_args([]).formats == ["nvfp4"]
    assert tl.parse_args(["--format", "mxfp4"]).formats == ["mxfp4"]
    assert tl.parse_args(["--formats", "nvfp4", "mxfp4"]).formats == ["nvfp4", "mxfp4"]
    with pytest.raises(SystemExit):
        tl.parse_args(["--formats", "fp8"])


@pytest.mark.parametrize("formats", [("nvfp4",), ("nvfp4", "mxfp4")])
def test_replot_draws_a_saved_run_again(tmp_path, monkeypatch, formats):
    rng = random.Random()
    rows = []
    for n, k in [(4096, 4096), (14336, 4096)]:
        for m, fmt in itertools.product((1, 16), formats):
            tail, rest = rng.uniform(0.5, 3.0), rng.uniform(3.0, 30.0)
            rows.append({"n": n, "k": k, "format": fmt, "rows": m, "layers": 8, "kernels": ["main", "reduce"],
                         "prep_us": 0.0, "main_us": rest + 2.0, "reduce_tail_us": tail, "handoff_us": -2.0,
                         "period_us": rest + tail, "unprofiled_us": (rest + tail) * rng.uniform(0.95, 1.05)})
    saved = tmp_path / "linear_timeline_test.json"
    saved.write_text(tl.json.dumps({"banner_line": "GPU | torch | commit", "rows": rows}))
    # Replotting needs no GPU.
    monkeypatch.setattr(tl.torch.cuda, "is_available", lambda: False)
    result = tl.main(["--replot", str(saved)])
    assert result["rows"] == rows
    png = tmp_path / "linear_timeline_test.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (tmp_path / "linear_timeline_test.md").read_text()
    assert sum(text.count(f"| {fmt} ") for fmt in formats) == len(rows)


def test_compare_shows_each_phase_change_for_rows_in_both_runs(capsys):
    rng = random.Random()

    def run(rows_measured, banner):
        rows = []
        for m in rows_measured:
            phases = {f"{name}_us": rng.uniform(-3.0, 30.0) for name in tl.PHASES}
            rows.append({"n": 4096, "k": 4096, "format": "nvfp4", "rows": m, "layers": 27, "kernels": ["main"],
                         **phases, "unprofiled_us": rng.uniform(1.0, 30.0)})
        return {"banner_line": banner, "rows": rows}

    base, new = run([1, 16, 64], "base GPU"), run([16, 64, 128], "new GPU")
    text = tl.comparison(base, new)
    assert "base: base GPU" in text and "new: new GPU" in text
    assert text.count("| 4096 x 4096 |") == 2  # 16 and 64 rows: the rows both runs measured
    b16, n16 = base["rows"][1], new["rows"][0]
    delta = n16["period_us"] - b16["period_us"]
    assert f"{b16['period_us']:.2f} -> {n16['period_us']:.2f} ({delta:+.2f})" in text
    assert "no row in common" in tl.comparison(run([1], "a"), run([2], "b"))


def test_compare_from_the_command_line(tmp_path, capsys, monkeypatch):
    row = {"n": 1024, "k": 8192, "format": "mxfp4", "rows": 8, "layers": 54, "kernels": ["main", "reduce"],
           **{f"{name}_us": 2.0 for name in tl.PHASES}, "unprofiled_us": 2.5}
    paths = []
    for name, period in (("base", 6.0), ("new", 5.5)):
        path = tmp_path / f"linear_timeline_{name}.json"
        path.write_text(tl.json.dumps({"banner_line": name, "rows": [{**row, "period_us": period}]}))
        paths.append(str(path))
    monkeypatch.setattr(tl.torch.cuda, "is_available", lambda: False)
    tl.main(["--compare", *paths])
    assert "6.00 -> 5.50 (-0.50)" in capsys.readouterr().out


def test_layers_with_a_bias_are_their_own_rows(capsys):
    """--bias rows say so in the tables and are compared only with rows that also had a bias; runs
    saved before the option (no "bias" key) read as without one."""
    assert not tl.parse_args([]).bias and tl.parse_args(["--bias"]).bias
    row = {"n": 6144, "k": 4096, "format": "nvfp4", "rows": 1, "layers": 18, "kernels": ["main", "reduce"],
           **{f"{name}_us": 3.0 for name in tl.PHASES}, "unprofiled_us": 3.5}
    biased = {**row, "bias": True, "period_us": 2.0}
    text = tl.markdown({"banner_line": "GPU", "rows": [row, biased]})
    assert len(re.findall(r"\| nvfp4 \+ bias +\|", text)) == 1 and len(re.findall(r"\| nvfp4 +\|", text)) == 1
    assert "no row in common" in tl.comparison({"banner_line": "a", "rows": [row]}, {"banner_line": "b", "rows": [biased]})
    assert "3.00 -> 2.00 (-1.00)" in tl.comparison({"banner_line": "a", "rows": [{**biased, "period_us": 3.0}]},
                                                   {"banner_line": "b", "rows": [biased]})
