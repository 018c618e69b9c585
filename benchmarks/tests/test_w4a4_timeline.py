"""benchmarks/w4a4_timeline.py on the CPU: the split of a profile's kernels into the chain's stages
and layers, and each stage's span. Profiling a graph needs a GPU; these feed it kernel timelines made
up here from the kernels' real names, each producer on one of its paths at random."""

from __future__ import annotations

import random

import pytest

from benchmarks import w4a4_timeline as wt

LINEAR = {
    "prep": "void fp4ops::cuda::linear_x_decode_kernel<fp4ops::Nvfp4Format>(fp4ops::cuda::LinearArgs)",
    "main": "void fp4ops::cuda::linear_mma_kernel<fp4ops::Nvfp4Format, fp4ops::Nvfp4Format, 1, true, false>(fp4ops::cuda::LinearArgs)",
    "reduce": "fp4ops::cuda::linear_reduce_kernel(fp4ops::cuda::LinearArgs)",
}
ZERO = "fp4ops::cuda::zero_words_kernel(unsigned int*, long)"
# Each producer stage's kernels on each of its paths (one launch, or its own g's separate passes).
PATHS = {
    "norm": [["void fp4ops::cuda::rms_norm_quantize_kernel<__nv_bfloat16, true>(fp4ops::cuda::RmsNormArgs)"],
             ["void fp4ops::cuda::rms_norm_quantize_cluster_kernel<__nv_bfloat16>(fp4ops::cuda::RmsNormArgs)"],
             [ZERO, "void fp4ops::cuda::rms_norm_quantize_kernel<fp4ops::cuda::AmaxTarget>(fp4ops::cuda::RmsNormArgs)",
              "void fp4ops::cuda::rms_norm_quantize_kernel<fp4ops::cuda::Nvfp4Source>(fp4ops::cuda::RmsNormArgs)"]],
    "quantize": [["void fp4ops::cuda::quantize_nvfp4_single_block_kernel<__nv_bfloat16, true>(__nv_bfloat16 const*, long)"],
                 ["void fp4ops::cuda::quantize_nvfp4_cluster_kernel<__nv_bfloat16, true>(__nv_bfloat16 const*, long)"],
                 [ZERO, "void fp4ops::cuda::amax_kernel<__nv_bfloat16>(__nv_bfloat16 const*, long, unsigned int*)",
                  "void fp4ops::cuda::quantize_kernel<__nv_bfloat16, true, fp4ops::cuda::Nvfp4Source>(__nv_bfloat16 const*)"]],
    "silu_mul": [["void fp4ops::cuda::silu_mul_quantize_octets_kernel<__nv_bfloat16>(fp4ops::cuda::SiluMulArgs)"],
                 ["void fp4ops::cuda::silu_mul_quantize_cluster_kernel<__nv_bfloat16>(fp4ops::cuda::SiluMulArgs)"]],
}


def random_chain(layer_count: int, rng: random.Random) -> tuple[list, list, list]:
    """The kernels of `layer_count` layers in launch order, with random durations; each layer's
    stage ends (each stage's last kernel's) and each stage's kernel names as built. As the profiler
    records a chain of programmatic dependents: each kernel ends after the one launched before it
    (it waits for it to complete, then does its own work), and may be recorded starting before that
    one did."""
    kernels, ends, names, end = [], [], [], 0.0
    for _ in range(layer_count):
        layer_ends, layer_names = [], []
        for kind in wt.KINDS:
            if kind == "linear":
                parts = (["prep"] if rng.random() < 0.5 else []) + ["main"] + (["reduce"] if rng.random() < 0.7 else [])
                group = [LINEAR[part] for part in parts]
            else:
                group = rng.choice(PATHS[kind])
            for name in group:
                start = end + rng.uniform(-3.0, 2.0)
                end = max(start + rng.uniform(0.5, 20.0), end + rng.uniform(0.03, 2.0))
                kernels.append(wt.Kernel(name, start, end))
            layer_ends.append(end)
            layer_names.append(group)
        ends.append(layer_ends)
        names.append(layer_names)
    return kernels, ends, names


def test_stages_and_spans_match_the_timeline():
    rng = random.Random()
    layer_count = rng.randint(2, 6)
    kernels, ends, names = random_chain(layer_count, rng)
    rng.shuffle(kernels)  # the profiler's order is not the launch order
    layers = wt.layers_of(kernels)
    assert [[[k.name for k in group] for group in layer] for layer in layers] == names
    spans = wt.layer_spans(layers)
    assert len(spans) == layer_count - 1  # the first layer has no predecessor
    for i, got in enumerate(spans):
        previous = [ends[i][-1], *ends[i + 1][:-1]]
        for stage, start, end in zip(wt.STAGES, previous, ends[i + 1]):
            assert got[stage] == pytest.approx(end - start, abs=1e-9), stage
        assert sum(got[stage] for stage in wt.STAGES) == pytest.approx(got["period"])
        assert got["period"] == pytest.approx(ends[i + 1][-1] - ends[i][-1])


def test_linear_kernel_ends_are_each_role_after_the_stage_before():
    rng = random.Random()
    layer_count = rng.randint(2, 5)
    kernels, ends, names = random_chain(layer_count, rng)  # in launch order: each layer's stages in turn
    expected, position = [], 0
    for i, layer_names in enumerate(names):
        by_stage = {}
        for s, (stage, kind, group) in enumerate(zip(wt.STAGES, wt.KINDS, layer_names)):
            start = ends[i][s - 1] if s else (ends[i - 1][-1] if i else None)
            if kind == "linear" and start is not None:
                roles = [wt.role(name) for name in group]
                by_stage[stage] = {part: k.end - start for part, k in zip(roles, kernels[position:position + len(group)])}
            position += len(group)
        expected.append(by_stage)
    rng.shuffle(kernels)
    got = wt.linear_kernel_ends(wt.layers_of(kernels))
    assert len(got) == layer_count - 1
    for layer_got, layer_expected in zip(got, expected[1:]):
        assert set(layer_got) == set(wt.LINEAR_STAGES)
        for stage in wt.LINEAR_STAGES:
            assert layer_got[stage] == pytest.approx(layer_expected[stage], abs=1e-9), stage
            assert layer_got[stage]["main"] <= layer_got[stage].get("reduce", layer_got[stage]["main"])
    medians = wt.median_linear_ends(got)
    for stage in wt.LINEAR_STAGES:  # a role is kept only where every layer's stage has it
        assert set(medians[stage]) == set.intersection(*(set(layer[stage]) for layer in got))


def test_profiles_that_are_not_whole_layers_are_refused():
    rng = random.Random()
    kernels, _, names = random_chain(2, rng)  # kernels in launch order
    with pytest.raises(ValueError, match="not whole layers"):  # the first norm left out
        wt.layers_of(kernels[len(names[0][0]):])
    lone = wt.Kernel(LINEAR["reduce"], 3.0, 4.0)
    with pytest.raises(wt.ProfileError, match="reduction without") as error:
        wt.layers_of([lone])
    assert error.value.kernel == lone
    with pytest.raises(ValueError, match="not whole layers"):  # a stage missing in the middle
        wt.layers_of([k for k in kernels if "silu_mul" not in k.name])


def test_short_names():
    assert wt.short_name(PATHS["norm"][1][0]) == "rms_norm_quantize_cluster_kernel"
    assert wt.short_name(LINEAR["reduce"]) == "linear_reduce_kernel"
    assert wt.short_name(ZERO) == "zero_words_kernel"


def saved_run(rng: random.Random, variants, rows_measured) -> dict:
    rows = []
    for variant in variants:
        for m in rows_measured:
            spans = {stage: rng.uniform(0.5, 30.0) for stage in wt.STAGES}
            rows.append({"variant": variant, "rows": m, "layers": 8, "span_us": spans, "period_us": sum(spans.values()),
                         "unprofiled_us": rng.uniform(50.0, 150.0),
                         "kernels": {stage: ["some_kernel"] for stage in wt.STAGES}})
    return {"banner_line": "GPU | torch | commit", "rows": rows}


def test_markdown_has_every_row_and_the_own_g_costs():
    rng = random.Random()
    result = saved_run(rng, ["nvfp4", "nvfp4 own g", "mxfp4"], [1, 64])
    text = wt.markdown(result)
    assert text.count("| nvfp4 own g |") == 4  # the stage table and the producers' kernels, 2 rows each
    assert "What dynamic activation scales add" in text
    static, own = result["rows"][1], result["rows"][3]  # 64 rows each
    assert f"{own['span_us']['o quantize'] - static['span_us']['o quantize']:+.2f}" in text
    assert "What dynamic" not in wt.markdown(saved_run(rng, ["mxfp4"], [1]))


def test_markdown_gives_the_linears_kernel_ends_where_the_run_has_them():
    rng = random.Random()
    result = saved_run(rng, ["nvfp4", "mxfp4"], [1])
    assert "The linears' kernels" not in wt.markdown(result)  # a run saved before the key: no table
    with_ends = result["rows"][0]
    with_ends["linear_ends_us"] = {stage: {"prep": rng.uniform(-2.0, 1.0), "main": rng.uniform(1.0, 20.0),
                                           "reduce": with_ends["span_us"][stage]} for stage in wt.LINEAR_STAGES}
    del with_ends["linear_ends_us"]["kv"]["prep"]  # a role a stage did not have
    text = wt.markdown(result)
    assert "The linears' kernels" in text
    q, kv = with_ends["linear_ends_us"]["q"], with_ends["linear_ends_us"]["kv"]
    assert f"| {q['prep']:.2f} / {q['main']:.2f} / {q['reduce']:.2f} |" in text
    assert f"| - / {kv['main']:.2f} / {kv['reduce']:.2f} |" in text


def test_replot_and_compare_need_no_gpu(tmp_path, monkeypatch, capsys):
    rng = random.Random()
    base, new = saved_run(rng, ["nvfp4"], [1, 8]), saved_run(rng, ["nvfp4"], [8, 64])
    paths = [tmp_path / "w4a4_timeline_base.json", tmp_path / "w4a4_timeline_new.json"]
    for path, run in zip(paths, (base, new)):
        path.write_text(wt.json.dumps(run))
    monkeypatch.setattr(wt.torch.cuda, "is_available", lambda: False)
    assert wt.main(["--replot", str(paths[1])])["rows"] == new["rows"]
    assert (tmp_path / "w4a4_timeline_new.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "w4a4_timeline_new.md").read_text().count("| nvfp4 ") == 4
    wt.main(["--compare", str(paths[0]), str(paths[1])])
    text = capsys.readouterr().out
    assert text.count("| nvfp4 ") == 1  # 8 rows: the only batch both runs measured
    b8, n8 = base["rows"][1], new["rows"][0]
    assert f"{n8['span_us']['down'] - b8['span_us']['down']:+.2f}" in text


def test_without_a_gpu_it_says_so(capsys, monkeypatch):
    monkeypatch.setattr(wt.torch.cuda, "is_available", lambda: False)
    assert wt.main([]) is None
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_arguments():
    args = wt.parse_args([])
    assert args.variants == list(wt.VARIANTS) and args.rows == wt.ROWS and args.layers == wt.LAYERS
    assert wt.parse_args(["--variants", "nvfp4 own g"]).variants == ["nvfp4 own g"]
    for bad in (["--variants", "fp8"], ["--layers", "1"]):
        with pytest.raises(SystemExit):
            wt.parse_args(bad)
    assert wt.variant_format("nvfp4 own g") == ("nvfp4", True) and wt.variant_format("mxfp4") == ("mxfp4", False)


def test_listing_shows_the_kernels_around_one():
    kernels = [wt.Kernel(LINEAR["main"], float(t), t + 1.5) for t in range(10, 40)]
    lines = wt.listing(kernels, kernels[15], count=3).splitlines()
    assert [float(line.split()[0]) for line in lines] == [12.0, 13.0, 14.0, 15.0, 16.0, 17.0]
    assert all(line.endswith("linear_mma_kernel") for line in lines)
