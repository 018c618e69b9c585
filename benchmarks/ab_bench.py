"""A/B of the CUDA kernels: this tree's csrc against another revision's, built side by side and
benchmarked in turns by the same harness (this tree's benchmarks.suite and Python package), so only
the kernels differ. From the repository root:

    python benchmarks/ab_bench.py --base HEAD~1 --rounds 2 -- --families dequantize --sizes 26 28 \\
        --no-eager --no-compile --no-torchao
    python benchmarks/ab_bench.py --base-csrc /path/to/old/csrc ...   (where the tree has no git history,
        or lacks the revision: `git archive REV csrc | tar -x -C DIR` where it has it)
    python benchmarks/ab_bench.py --base HEAD --also staged=/path/to/variant/csrc -- --families producers \
        --producer-shapes 8192,8192 16384,16384 --no-eager --no-compile --no-torchao   (a third side)
    python benchmarks/ab_bench.py --base HEAD~1 --bench decode -- --shapes 4096,4096 28672,8192 \
        --rows 1 8 16 64 --no-llama --fp4-only     (the linear kernels in the decode stream; without
        --fp4-only every run also times cuBLAS bf16 and dequantize + F.linear, the same in both builds)
    python benchmarks/ab_bench.py --patch probe=benchmarks/probes/patches/decode_in_three.patch --bench decode -- ...
        (this tree as 'base' and once more with the patch applied to a copy of its csrc, both built:
        an experiment kept as a patch file, e.g. the timing probes under benchmarks/probes/patches;
        several files apply in order: NAME=FILE,FILE; with --base as well, they run beside 'new')
    python benchmarks/ab_bench.py --env carve=FP4OPS_EXP_CARVEOUT=100 --bench decode -- ...
        (one build, this tree's, run as 'base' and once more per --env side with its environment
        variables set: the knobs of a temporary experiment patch; with --base as well, the env
        sides run the new build)
    python benchmarks/ab_bench.py --plan ...    (checks the arguments and prints the sides, the
        builds and each run's command, without building: before handing the A/B to a GPU machine)

What it does:
1. copies this tree (without .git and build outputs) to <work>/base (--work, default a new
   temporary folder) and replaces its csrc with `git archive <base> csrc` (or with a copy of the
   --base-csrc folder); each `--also NAME=CSRC` likewise to <work>/NAME with that csrc folder, and
   each `--patch NAME=FILE` to <work>/NAME with this tree's csrc and the patch applied (`git apply`);
2. builds them all (`setup.py build_ext --inplace`; FP4OPS_CUDA_ARCHS and MAX_JOBS from the
   environment, e.g. FP4OPS_CUDA_ARCHS=9.0 MAX_JOBS=8: the builds run at once, each with
   MAX_JOBS compilers);
3. runs `python -m benchmarks.suite <args>` (this tree's suite; `--bench decode`:
   `benchmarks.decode_stream`) for new, then base, then the --also, --patch and --env sides, `--rounds`
   times, each run's JSON under <out>/<side><round>/ (--out, default <work>/results; PYTHONPATH
   picks the side's fp4ops; an --env side's variables are added to its runs' environment);
4. prints and writes <out>/ab_summary.md: the suite's every fp4ops row at 2^26 elements or more
   (every GEMV and fused-producer shape), % of its run's ceiling and the median / fastest call in
   us, one column per run; the decode stream's FP4 layer time per case (us per layer), one column
   per run; then the Llama-3.1-8B stack's FP4 tokens/s per batch where the runs timed it. Each
   table ends with every side's speed-up over base (the fastest run of each side). The file is
   rewritten after every run, so a run that fails leaves the summary of those before it; on a
   machine whose commands have a time limit, `--time-budget SECONDS` starts no run that would
   likely end past it (the longest run so far as the estimate) and summarizes what it has.

Alternating the sides in one session on one GPU is what makes a few points of difference
readable: runs on other days or machines move by as much (docs/notebook/performance-log.md, "Method notes").
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
COPY_EXCLUDES = shutil.ignore_patterns(".git", "build", "*.so", "__pycache__", "*.egg-info", ".whl")


def revision_exists(revision: str) -> bool:
    """Whether this checkout's git knows `revision` as a commit (False without git)."""
    if shutil.which("git") is None:
        return False
    verify = ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"]
    return subprocess.run(verify, capture_output=True).returncode == 0


def copy_with_base_kernels(base: str | None, work: pathlib.Path, base_csrc: pathlib.Path | None = None,
                           side: str = "base") -> pathlib.Path:
    """This tree at work/<side>, with csrc as of revision `base`, or copied from the folder base_csrc."""
    if (base is None) == (base_csrc is None):
        raise ValueError("give exactly one of base (a revision) and base_csrc (a folder)")
    target = work / side
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(REPO, target, ignore=COPY_EXCLUDES)
    shutil.rmtree(target / "csrc")
    if base_csrc is not None:
        shutil.copytree(base_csrc, target / "csrc", ignore=COPY_EXCLUDES)
        return target
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", base, "csrc"],
                             check=True, capture_output=True).stdout
    archive_path = work / "base_csrc.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12: refuse links out of target
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)
    return target


def apply_patches(root: pathlib.Path, patches: list[pathlib.Path]) -> None:
    """`git apply` each patch, in order, to the tree at `root` (paths relative to it, e.g.
    csrc/cuda/...). Git does not look for a repository above `root`, so a work folder inside a
    checkout is patched itself, not the checkout. CalledProcessError says which patch failed."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent)}
    for patch in patches:
        subprocess.run(["git", "apply", str(patch)], cwd=root, env=env, check=True, capture_output=True, text=True)


def patch_error(patches: list[pathlib.Path]) -> str | None:
    """Why these patches cannot make a side, or None: each file must exist and change files under
    csrc/ only (the harness, the benchmarks and the package stay this tree's on every side), and
    all of them must apply, in order, to this tree's csrc."""
    if shutil.which("git") is None:
        return "needs git (`git apply`)"
    for patch in patches:
        if not patch.is_file():
            return f"{patch}: no such file"
        listed = subprocess.run(["git", "apply", "--numstat", str(patch)], capture_output=True, text=True)
        if listed.returncode != 0:
            return f"{patch}: not a patch git can read ({listed.stderr.strip()})"
        paths = [line.split("\t")[-1] for line in listed.stdout.splitlines() if line.strip()]
        outside = [path for path in paths if not path.startswith("csrc/")]
        if not paths or outside:
            return f"{patch}: expected changes to files under csrc/ only, got {', '.join(outside) or 'none'}"
    with tempfile.TemporaryDirectory(prefix="fp4ops-ab-check-") as scratch:
        root = pathlib.Path(scratch) / "tree"
        shutil.copytree(REPO / "csrc", root / "csrc", ignore=COPY_EXCLUDES)
        try:
            apply_patches(root, patches)
        except subprocess.CalledProcessError as error:
            return f"does not apply to this tree's csrc: {error.stderr.strip()}"
    return None


def copy_with_patches(work: pathlib.Path, patches: list[pathlib.Path], side: str) -> pathlib.Path:
    """This tree at work/<side> with the patches applied to its csrc."""
    target = copy_with_base_kernels(None, work, REPO / "csrc", side=side)
    apply_patches(target, patches)
    return target


def build_both(trees: dict[str, pathlib.Path], out: pathlib.Path) -> None:
    """setup.py build_ext --inplace in every tree at once; each log under out/build_<side>.log."""
    procs = {}
    for side, tree in trees.items():
        log = open(out / f"build_{side}.log", "w")
        procs[side] = (subprocess.Popen([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree,
                                        stdout=log, stderr=subprocess.STDOUT), log)
    failed = []
    for side, (proc, log) in procs.items():
        if proc.wait() != 0:
            failed.append(side)
        log.close()
    if failed:
        raise SystemExit(f"build failed for {', '.join(failed)}: see {out}/build_<side>.log")


BENCH_MODULES = {"suite": "benchmarks.suite", "decode": "benchmarks.decode_stream"}


def run_bench(tree: pathlib.Path, bench_args: list[str], run_dir: pathlib.Path, bench: str = "suite",
              extra_env: dict[str, str] | None = None) -> None:
    env = {**os.environ, **(extra_env or {}), "PYTHONPATH": str(tree / "python")}
    with open(run_dir.with_suffix(".log"), "w") as log:
        subprocess.run([sys.executable, "-m", BENCH_MODULES[bench], *bench_args, "--out", str(run_dir), "--tag", "ab"],
                       cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)


def sides_of(runs: dict[str, pathlib.Path]) -> list[str]:
    """The sides in the order their runs came ("new1", "base1", "alt1", "new2": new, base, alt)."""
    return list(dict.fromkeys(name.rstrip("0123456789") for name in runs))


def compared_sides(runs: dict[str, pathlib.Path]) -> list[str]:
    """Every side but base: each gets a column of its figures against base's."""
    return [side for side in sides_of(runs) if side != "base"]


def best_of_sides(values: dict[str, float], pick, side: str = "new") -> str:
    """`side`'s figure over base's, each side's best run chosen by `pick` (min for times, max for
    rates) and the ratio oriented so that above 1 means `side` is better; '-' where a side is missing."""
    of_side = lambda s: (v for name, v in values.items() if name.rstrip("0123456789") == s)  # noqa: E731
    best = {s: pick(of_side(s), default=None) for s in (side, "base")}
    if None in best.values():
        return "-"
    return f"{best['base'] / best[side]:.3f}x" if pick is min else f"{best[side] / best['base']:.3f}x"


def run_rounds(trees: dict[str, pathlib.Path], rounds: int, bench_one, write_summary, out: pathlib.Path,
               time_budget: float | None = None, started: float | None = None, clock=time.monotonic) -> dict[str, pathlib.Path]:
    """The runs, side after side, round after round: `bench_one(tree, name)` for names new1, base1,
    ..., new2, ...; `write_summary(runs so far)` after each, so that a run that fails, or a machine
    whose time runs out, leaves the summary of what was done. With time_budget, a run is not started
    where the longest run so far would end it past time_budget seconds after `started`; a budget
    spent before the first run ends the A/B with an error. A failed run ends the A/B with its log
    named."""
    started = clock() if started is None else started
    runs: dict[str, pathlib.Path] = {}
    longest = 0.0
    for round_index in range(1, rounds + 1):
        for side, tree in trees.items():
            name = f"{side}{round_index}"
            elapsed = clock() - started
            if time_budget is not None and elapsed + longest > time_budget:
                if not runs:  # an empty summary would read as an A/B with nothing to compare
                    raise SystemExit(f"no run started: {elapsed:.0f} s of the {time_budget:.0f} s time budget were gone "
                                     "before the first (the builds); give the A/B a larger --time-budget")
                print(f"stopping before {name}: {elapsed:.0f} s gone, runs take up to {longest:.0f} s, "
                      f"budget {time_budget:.0f} s ({len(runs)} runs done)", flush=True)
                return runs
            print(f"bench {name} ...", flush=True)
            began = clock()
            try:
                bench_one(tree, name)
            except subprocess.CalledProcessError as error:
                write_summary(runs)
                raise SystemExit(f"bench {name} failed (exit status {error.returncode}): see {out / name}.log; "
                                 f"the summary of the {len(runs)} runs before it is in {out / 'ab_summary.md'}") from error
            longest = max(longest, clock() - began)
            runs[name] = out / name
            write_summary(runs)
    return runs


def summarize(runs: dict[str, pathlib.Path]) -> str:
    """Markdown: one row per fp4ops result at 2^26 elements or more, every GEMV shape and every fused
    producer shape (the suite's --producer-shapes pick those), one column per run ("pct% (median /
    fastest us)"; '-' where a run lacks the row), then each side's speed-up over base (medians, each
    side's fastest run)."""
    table: dict[tuple, dict[str, str]] = {}
    medians: dict[tuple, dict[str, float]] = {}
    for name, run_dir in runs.items():
        (result_file,) = sorted(run_dir.glob("suite_*.json"))
        for row in json.loads(result_file.read_text())["rows"]:
            by_shape = row["family"] in ("gemv", "producers")
            if row["impl"] != "fp4ops" or (row["numel"] < 2**26 and not by_shape):
                continue
            size = " x ".join(map(str, row["shape"])) if by_shape else f"2^{row['numel'].bit_length() - 1}"
            key = (row["op"], row["dtype"], size)
            table.setdefault(key, {})[name] = f"{row['pct']:.1f}% ({row['us']:.1f} / {row['us_min']:.1f})"
            medians.setdefault(key, {})[name] = row["us"]
    sides = compared_sides(runs)
    header = ["op", "dtype", "size", *runs, *(f"{side} / base" for side in sides)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in sorted(table):
        ratios = [best_of_sides(medians[key], min, side) for side in sides]
        lines.append("| " + " | ".join([*key, *(table[key].get(name, "-") for name in runs), *ratios]) + " |")
    return "\n".join(lines) + "\n"


def summarize_decode(runs: dict[str, pathlib.Path]) -> str:
    """Markdown: one row per decode-stream case (shape, format, x, rows), the FP4 layer's time per
    layer in us for each run, then new's speed-up over base from each side's fastest run ('-' where
    a side lacks the case); where the runs timed the Llama-3.1-8B stack, a second table of its FP4
    tokens/s per (format, x, batch), with new's gain over base from each side's best run (x "fp4,
    layers": the W4A4 layers with fp4ops' producers, benchmarks/w4a4_layers.py)."""
    layers: dict[tuple, dict[str, float]] = {}
    llama: dict[tuple, dict[str, float]] = {}
    for name, run_dir in runs.items():
        (result_file,) = sorted(run_dir.glob("decode_*.json"))
        result = json.loads(result_file.read_text())
        for row in result["rows"]:
            layers.setdefault((row["n"], row["k"], row["format"], row["dtype"], row["rows"]), {})[name] = row["fp4_us"]
        for row in result.get("llama", []):
            llama.setdefault((row["format"], row["dtype"], row["rows"]), {})[name] = row["fp4_tokens_per_s"]
        for row in result.get("llama_w4a4", []):  # the W4A4 layers with fused producers
            llama.setdefault((row["format"], "fp4, layers", row["rows"]), {})[name] = row["fp4_tokens_per_s"]
    sides = compared_sides(runs)
    header = ["N x K", "format", "x", "rows", *runs, *(f"{side} / base" for side in sides)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in sorted(layers):
        times = layers[key]
        cells = [f"{times[name]:.2f}" if name in times else "-" for name in runs]
        ratios = [best_of_sides(times, min, side) for side in sides]
        lines.append("| " + " | ".join([f"{key[0]} x {key[1]}", key[2], key[3], str(key[4]), *cells, *ratios]) + " |")
    if llama:
        header = ["format", "x", "batch", *runs, *(f"{side} / base" for side in sides)]
        lines += ["", "Llama-3.1-8B stack, FP4 tokens/s:", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for key in sorted(llama):
            rates = llama[key]
            cells = [f"{rates[name]:.0f}" if name in rates else "-" for name in runs]
            ratios = [best_of_sides(rates, max, side) for side in sides]
            lines.append("| " + " | ".join([key[0], key[1], str(key[2]), *cells, *ratios]) + " |")
    return "\n".join(lines) + "\n"


def side_name_error(name: str, taken) -> str | None:
    """Why `name` cannot name a side (runs are named side + round: no trailing digit), or None."""
    if not name.isidentifier() or name.rstrip("0123456789") != name or name in ("new", "base", *taken):
        return "NAME must be a new identifier not ending in a digit (not new or base)"
    return None


def parse_env_side(spec: str, taken) -> tuple[str, dict[str, str]]:
    """--env NAME=VAR=VALUE[,VAR=VALUE...] -> (NAME, {VAR: VALUE}); ValueError says what is wrong."""
    name, _, assignments = spec.partition("=")
    if (error := side_name_error(name, taken)) is not None:
        raise ValueError(error)
    variables: dict[str, str] = {}
    for assignment in assignments.split(","):
        variable, equals, value = assignment.partition("=")
        if not equals or not variable.isidentifier():
            raise ValueError(f"expected VAR=VALUE, got {assignment!r}")
        variables[variable] = value
    return name, variables


def plan(base: str | None, base_csrc: pathlib.Path | None, also: dict[str, pathlib.Path], env_sides: dict[str, dict[str, str]],
         rounds: int, bench: str, bench_args: list[str], patch_sides: dict[str, list[pathlib.Path]] | None = None) -> str:
    """What an A/B with these (checked) arguments would build and run, in words (--plan)."""
    patch_sides = patch_sides or {}
    if base is None and base_csrc is None:
        sides = [("base", "this tree's build")]
        builds = ["this tree"]
    else:
        kernels = f"`git archive {base} csrc`" if base is not None else str(base_csrc)
        sides = [("new", "this tree's build"), ("base", f"this tree with {kernels}")]
        sides += [(name, f"this tree with {folder}") for name, folder in also.items()]
        builds = ["this tree", f"base ({kernels})", *(f"{name} ({folder})" for name, folder in also.items())]
    patched = {name: " + ".join(str(patch) for patch in patches) for name, patches in patch_sides.items()}
    sides += [(name, f"this tree with {files} applied") for name, files in patched.items()]
    builds += [f"{name} (this tree + {files})" for name, files in patched.items()]
    built = [name for name, _ in sides]
    sides += [(name, "this tree's build, with " + " ".join(f"{k}={v}" for k, v in variables.items()))
              for name, variables in env_sides.items()]
    command = " ".join([sys.executable, "-m", BENCH_MODULES[bench], *bench_args, "--out", "<out>/<side><round>", "--tag", "ab"])
    lines = [f"builds ({len(builds)}, at once): " + "; ".join(builds),
             "sides, in the order each round runs them:",
             *(f"  {name}: {what}" for name, what in sides),
             f"rounds: {rounds} ({rounds * len(sides)} runs); each run: {command}"]
    if len(built) < len(sides):
        lines.append("(the --env sides run the build of " + ("'new'" if "new" in built else "'base'") + ")")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    base = parser.add_mutually_exclusive_group()
    base.add_argument("--base", help="revision whose csrc is the 'base' side (e.g. HEAD~1)")
    base.add_argument("--base-csrc", type=pathlib.Path, help="folder holding the 'base' side's csrc")
    parser.add_argument("--also", action="append", default=[], metavar="NAME=CSRC",
                        help="one more side: this tree with the csrc folder CSRC, named NAME (repeatable)")
    parser.add_argument("--patch", action="append", default=[], metavar="NAME=FILE[,FILE...]",
                        help="one more side: this tree with these patch files (changes under csrc/) applied in order, "
                             "named NAME (repeatable); without --base or --base-csrc, this tree runs as 'base'")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VAR=VALUE[,VAR=VALUE...]",
                        help="one more side: this tree's build run with these environment variables, named NAME "
                             "(repeatable); without --base or --base-csrc, the A/B builds only this tree, "
                             "which runs as 'base' and as each --env side")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side, alternating (default 2)")
    parser.add_argument("--bench", choices=sorted(BENCH_MODULES), default="suite",
                        help="suite: benchmarks.suite (default); decode: benchmarks.decode_stream")
    parser.add_argument("--out", default=None, help="folder for the logs, JSONs and ab_summary.md (default: <work>/results)")
    parser.add_argument("--work", default=None, help="folder for the base copy (default: a temporary one)")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                        help="start no run that would likely end later than this many seconds after the start "
                             "(the longest run so far as the estimate); the summary covers the runs done")
    parser.add_argument("--plan", action="store_true",
                        help="check the arguments, print the sides, builds and run commands, and exit without building")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER,
                        help="after '--': arguments for the benchmark (`python -m benchmarks.suite` or decode_stream)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.time_budget is not None and args.time_budget <= 0:
        parser.error("--time-budget must be positive")
    if args.base is None and args.base_csrc is None and not args.env and not args.patch:
        parser.error("give --base, --base-csrc or at least one --patch or --env side")
    if args.also and args.base is None and args.base_csrc is None:
        parser.error("--also needs --base or --base-csrc")
    also: dict[str, pathlib.Path] = {}
    for spec in args.also:
        name, _, folder = spec.partition("=")
        if (error := side_name_error(name, also)) is not None:
            parser.error(f"--also {spec}: {error}")
        if not (pathlib.Path(folder) / "cuda").is_dir():
            parser.error(f"--also {spec}: expected a csrc folder (with cuda/ in it)")
        also[name] = pathlib.Path(folder).resolve()
    patch_sides: dict[str, list[pathlib.Path]] = {}
    for spec in args.patch:
        name, _, files = spec.partition("=")
        if (error := side_name_error(name, [*also, *patch_sides])) is not None:
            parser.error(f"--patch {spec}: {error}")
        patches = [pathlib.Path(file).resolve() for file in files.split(",") if file]
        if (error := patch_error(patches) if patches else "expected NAME=FILE[,FILE...]") is not None:
            parser.error(f"--patch {spec}: {error}")
        patch_sides[name] = patches
    env_sides: dict[str, dict[str, str]] = {}
    for spec in args.env:
        try:
            name, variables = parse_env_side(spec, [*also, *patch_sides, *env_sides])
        except ValueError as error:
            parser.error(f"--env {spec}: {error}")
        env_sides[name] = variables
    base_csrc = args.base_csrc.resolve() if args.base_csrc else None
    if base_csrc is not None and not (base_csrc / "cuda").is_dir():
        parser.error(f"--base-csrc {args.base_csrc}: expected a csrc folder (with cuda/ in it)")
    if args.base is not None and not revision_exists(args.base):
        parser.error(f"--base {args.base}: no such revision in this checkout's git (a copy of the tree may "
                     f"lack recent commits); export its kernels with `git archive {args.base} csrc | tar -x -C DIR` "
                     "where the revision exists, and pass --base-csrc DIR/csrc")
    if args.plan:
        print(plan(args.base, base_csrc, also, env_sides, args.rounds, args.bench, bench_args, patch_sides))
        return
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="fp4ops-ab-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = pathlib.Path(args.out).resolve() if args.out else work / "results"
    out.mkdir(parents=True, exist_ok=True)

    if args.base is None and base_csrc is None:
        trees = {"base": REPO}
        what = "this tree"
    else:
        trees = {"new": REPO, "base": copy_with_base_kernels(args.base, work, base_csrc)}
        trees.update({name: copy_with_base_kernels(None, work, folder, side=name) for name, folder in also.items()})
        what = f"this tree, {args.base or base_csrc}'s csrc" + "".join(f" and {folder}" for folder in also.values())
    trees.update({name: copy_with_patches(work, patches, name) for name, patches in patch_sides.items()})
    what += "".join(f" and this tree + {' + '.join(p.name for p in patches)}" for patches in patch_sides.values())
    print(f"building {what} (logs in {out}) ...", flush=True)
    build_both(trees, out)
    trees.update({name: REPO for name in env_sides})  # each runs the build of this tree made above
    summarize_runs = summarize_decode if args.bench == "decode" else summarize
    side_env = lambda name: env_sides.get(name.rstrip("0123456789"))  # noqa: E731
    runs = run_rounds(trees, args.rounds, lambda tree, name: run_bench(tree, bench_args, out / name, args.bench, side_env(name)),
                      lambda done: (out / "ab_summary.md").write_text(summarize_runs(done)),
                      out, time_budget=args.time_budget, started=started)
    print(summarize_runs(runs))


if __name__ == "__main__":
    main()
