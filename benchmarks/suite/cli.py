"""The benchmark suite's command line (targets: docs/performance.md, Targets), run from the
repository root: `python -m benchmarks.suite --help`.

    python -m benchmarks.suite                      # every family, 2^20..2^28, three dtypes, baselines
    python -m benchmarks.suite --families gemv --sizes 26 28
    python -m benchmarks.suite --families producers          # the fused producers alone
    python -m benchmarks.suite --report benchmarks/results/suite_h100.json [--readme README.md]

A run prints the banner, the table and the targets, and writes under --out: suite_<gpu>.json
(after every input), suite_<gpu>.md (targets and every row) and suite_<gpu>_<family>.png.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from . import report, targets
from .baselines import Baselines
from .cases import GEMV_SHAPES, PRODUCER_SHAPES
from .runner import FAMILIES, SuiteConfig, run_suite


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    p.add_argument("--sizes", type=int, nargs="+", default=[20, 22, 24, 26, 28], help="log2 of the element counts")
    p.add_argument("--dtypes", nargs="+", choices=["bfloat16", "float16", "float32"],
                   default=["bfloat16", "float16", "float32"], help="input/output dtypes of the element-wise ops")
    p.add_argument("--gemv-shapes", nargs="+", metavar="M,K,L", default=None,
                   help="GEMV shapes (default: the three seed shapes and 16384,16384,1)")
    p.add_argument("--producer-shapes", nargs="+", metavar="ROWS,H", default=None,
                   help="fused producers' output shapes, bf16 (default: rows 1 8 64 1024 8192 x H 4096 8192 16384, "
                        "and 16384,16384)")
    p.add_argument("--reps", type=int, default=30, help="timed calls per row (median)")
    p.add_argument("--no-eager", action="store_true", help="skip the eager reference baselines")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    p.add_argument("--no-torchao", action="store_true", help="skip the torchao baselines")
    p.add_argument("--device", default=None, help="cuda (default when present) or cpu (exercises the code only)")
    p.add_argument("--out", default="benchmarks/results", help="folder for the JSON, Markdown and plots")
    p.add_argument("--tag", default=None, help="file name tag (default: the GPU, e.g. h100)")
    p.add_argument("--report", nargs="+", metavar="JSON",
                   help="render saved results instead of running: files from one GPU are merged (a suite run in "
                        "parts), several GPUs get one column each in the headline")
    p.add_argument("--readme", default=None, help="put the headline table into this README between its markers")
    return p


def _shape(text: str, names: str = "M,K,L", flag: str = "--gemv-shapes") -> tuple[int, ...]:
    """'7168,2048,4' -> (7168, 2048, 4): as many integers as `names` has."""
    count = names.count(",") + 1
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != count:
        raise SystemExit(f"{flag}: expected {names} ({count} integers), got {text!r}")
    return values


def _render(results: list[dict], out: str, tag: str | None, readme: str | None) -> None:
    first = results[0]
    prefix = f"suite_{tag or report.gpu_tag(first)}"
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{prefix}.md"), "w") as f:
        f.write(report.markdown(first))
    for path in report.plot(first, out, prefix):
        print("wrote", path)
    print(targets.render(targets.evaluate(first)))
    if readme:
        report.update_readme(readme, report.headline(results))
        print("headline table written to", readme)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.report:
        results = []
        for path in args.report:
            with open(path) as f:
                results.append(json.load(f))
        _render(report.merge_by_gpu(results), args.out, args.tag, args.readme)
        return
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        print("no GPU: the CPU mode exercises the suite's code; its numbers are not measurements of fp4ops' kernels")
    config = SuiteConfig(device=device, sizes=args.sizes, dtypes=[getattr(torch, d) for d in args.dtypes],
                         families=tuple(args.families), reps=args.reps,
                         gemv_shapes=[_shape(s) for s in args.gemv_shapes] if args.gemv_shapes else list(GEMV_SHAPES),
                         producer_shapes=([_shape(s, "ROWS,H", "--producer-shapes") for s in args.producer_shapes]
                                          if args.producer_shapes else list(PRODUCER_SHAPES)),
                         baselines=Baselines(eager=not args.no_eager, compiled=not args.no_compile,
                                             torchao=not args.no_torchao))
    tag = args.tag or report.gpu_tag({"banner": {"gpu": torch.cuda.get_device_name(device) if device.type == "cuda"
                                                 else "cpu"}})
    config.json_path = os.path.join(args.out, f"suite_{tag}.json")
    result = run_suite(config)
    print(report.heading(result))
    print(report.table(result))
    if producers := report.producers_table(result):
        print(producers)
    _render([result], args.out, tag, args.readme)
