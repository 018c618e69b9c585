"""The targets of docs/performance.md (Targets), evaluated on a suite result: for each, the worst
measured case, the goal and whether it is met. Targets on % of copy use sizes 2^26 and 2^28
(every dtype measured); a target with no measured row says so instead of passing."""

from __future__ import annotations

from dataclasses import dataclass

from .cases import DECODE_MAX_NUMEL, PRODUCER_PLAIN

TARGET_SIZES = (1 << 26, 1 << 28)


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    worst: str
    met: bool | None  # None: nothing measured
    row: dict | None = None  # the worst case's row, where one row decides


def _rows(result: dict, *, op=None, impl="fp4ops", family=None, sizes=TARGET_SIZES, dtypes=None) -> list[dict]:
    out = []
    for r in result["rows"]:
        if "us" not in r or (impl and r["impl"] != impl) or (op and r["op"] != op) or (family and r["family"] != family):
            continue
        if sizes and r["family"] != "gemv" and r["numel"] not in sizes:
            continue
        if dtypes and r["dtype"] not in dtypes:
            continue
        out.append(r)
    return out


def size_label(r: dict) -> str:
    if r["family"] == "gemv":
        return "(M, K, L) = ({}, {}, {})".format(*r["shape"])
    if r["numel"] <= DECODE_MAX_NUMEL or r["family"] == "producers":  # a producer's row length matters
        return " x ".join(map(str, r["shape"]))
    return f"2^{r['numel'].bit_length() - 1}"


def _where(r: dict) -> str:
    return f"{r['op']}, {r['dtype']}, {size_label(r)}"


def _min_pct(name: str, goal: float, rows: list[dict]) -> Target:
    if not rows:
        return Target(name, f">= {goal:g}%", "not measured", "", None)
    worst = min(rows, key=lambda r: r["pct"])
    return Target(name, f">= {goal:g}%", f"{worst['pct']:.1f}%", _where(worst), worst["pct"] >= goal, worst)


def _with_cold_graph(target: Target) -> Target:
    """Adds the worst case's back-to-back figure (graph replay over distinct weights, cold in L2)
    to the measured text. The verdict stays on the cold-L2 CUDA-event timing of single calls."""
    r = target.row
    if r is not None and r.get("graph_cold") and r.get("us_graph"):
        target.measured += f" ({r['pct'] * r['us'] / r['us_graph']:.1f}% back to back)"
    return target


def _min_ratio(name: str, goal: float, pairs: list[tuple[float, str]], unit: str = "x") -> Target:
    """pairs: (ratio, where); the goal is ratio >= goal."""
    if not pairs:
        return Target(name, f">= {goal:g}{unit}", "not measured", "", None)
    ratio, where = min(pairs)
    return Target(name, f">= {goal:g}{unit}", f"{ratio:.2f}{unit}", where, ratio >= goal)


def _index(rows: list[dict]) -> dict:
    return {(r["dtype"], r["numel"], tuple(r["shape"])): r for r in rows}


def _gemv_against_read(result: dict) -> Target:
    """One cold GEMV call's bandwidth against the same run's cold read of a GEMV's bytes (the
    faster of the two read kernels, per shape; bandwidths, so formats that move fewer bytes compare
    fairly): a cold single call cannot reach the copy ceiling, which is measured over 512 MB. The
    goal is >= 95% of the read's."""
    name, goal = "GEMV one cold call, % of a same-run read of its bytes", 95.0
    reads: dict[tuple, float] = {}
    for r in _rows(result, family="gemv", impl=None):
        if r["impl"].startswith("read of the same bytes"):
            key = tuple(r["shape"])
            reads[key] = max(reads.get(key, r["pct"]), r["pct"])
    pairs = [(100 * r["pct"] / reads[tuple(r["shape"])], r) for r in _rows(result, family="gemv")
             if tuple(r["shape"]) in reads]
    if not pairs:
        return Target(name, f">= {goal:g}%", "not measured", "", None)
    share, worst = min(pairs, key=lambda p: p[0])
    return _with_cold_graph(Target(name, f">= {goal:g}%", f"{share:.1f}% ({worst['pct']:.1f}% of copy)", _where(worst),
                                   share >= goal, worst))


def producer_pairs(result: dict, sizes=TARGET_SIZES) -> list[tuple[dict, dict | None, dict | None]]:
    """(producer row, its unfused sequence's row, its plain quantizer's row) per fused-producer
    row of the run, the others None where not measured."""
    by_op = {(r["op"], r["impl"].startswith("unfused"), tuple(r["shape"])): r
             for r in _rows(result, family="producers", impl=None, sizes=sizes)}
    return [(r, by_op.get((r["op"], True, tuple(r["shape"]))),
             by_op.get((PRODUCER_PLAIN[r["op"]], False, tuple(r["shape"]))))
            for r in _rows(result, family="producers", sizes=sizes) if r["op"] in PRODUCER_PLAIN]


def _producers(result: dict) -> list[Target]:
    """Fused producers: against the plain quantizer as a share of copy (a producer moves more bytes
    than the quantizer alone, so the time ratio alone would not say whether it runs as well), and
    against the unfused sequence as a speed-up."""
    pairs = producer_pairs(result)
    plain = [(p["pct"] / r["pct"], r, p) for r, _, p in pairs if p]
    name = "fused producers: the plain quantizer's % of copy / the producer's"
    if plain:
        ratio, r, p = max(plain, key=lambda t: t[0])
        target = Target(name, "<= 1.05", f"{ratio:.3f} ({r['pct']:.1f}% vs {p['pct']:.1f}% of copy; "
                        f"time {r['us'] / p['us']:.2f}x)", _where(r), ratio <= 1.05, r)
    else:
        target = Target(name, "<= 1.05", "not measured", "", None)
    unfused = _min_ratio("fused producers vs the unfused sequence (speed-up)", 1.8,
                         [(u["us"] / r["us"], _where(r)) for r, u, _ in pairs if u])
    return [target, unfused]


def evaluate(result: dict) -> list[Target]:
    t = [
        _min_pct("amax, % of read", 95, _rows(result, op="amax")),
        _min_pct("NVFP4 quantize (scale given), % of copy", 90, _rows(result, op="nvfp4 quantize (scale given)")),
        _min_pct("MXFP4 quantize (floor and rceil), % of copy", 90, _rows(result, family="mxfp4 quantize")),
        _min_pct("dequantize (fp16/bf16 out), % of copy", 90,
                 _rows(result, family="dequantize", dtypes=("bfloat16", "float16"))),
    ]
    # Own amax: total time against amax alone plus quantize alone (the goal is a ratio <= 1.05).
    amax, given = _index(_rows(result, op="amax")), _index(_rows(result, op="nvfp4 quantize (scale given)"))
    fused = [(r["us"] / (amax[k]["us"] + given[k]["us"]), _where(r))
             for r in _rows(result, op="nvfp4 quantize (own amax)")
             if (k := (r["dtype"], r["numel"], tuple(r["shape"]))) in amax and k in given]
    worst = max(fused) if fused else None
    t.append(Target("NVFP4 quantize, own amax: time / (amax + quantize)", "<= 1.05",
                    f"{worst[0]:.3f}" if worst else "not measured", worst[1] if worst else "",
                    worst[0] <= 1.05 if worst else None))
    t.append(_gemv_against_read(result))
    # Decode: 1 x 4096 NVFP4 quantize with its own amax, one launch, <= 5 us of device time.
    decode = [r for r in _rows(result, op="nvfp4 quantize (own amax)", sizes=None) if tuple(r["shape"]) == (1, 4096)]
    if decode:
        r = decode[0]
        us = r["us_graph"] if r.get("us_graph") is not None else r["us"]
        t.append(Target("1 x 4096 NVFP4 quantize, own amax", "1 launch, <= 5 us",
                        f"{r['launches'] if r['launches'] is not None else 'uncounted'} launch(es), {us:.2f} us (graph replay; cold events {r['us']:.2f} us)",
                        _where(r), r["launches"] == 1 and us <= 5.0))
    else:
        t.append(Target("1 x 4096 NVFP4 quantize, own amax", "1 launch, <= 5 us", "not measured", "", None))
    # Against the baselines of the same run: time ratios, per element (same numel and dtype).
    for op, impl, goal, label in (
            ("nvfp4 quantize (scale given)", "torch bf16->fp8 cast", 1.0, "NVFP4 quantize vs PyTorch's fp8 cast"),
            (None, "reference (torch.compile)", 1.5, "every op vs torch.compile of the reference")):
        ours = _index(_rows(result, op=op))
        pairs = []
        for b in _rows(result, op=op, impl=impl):
            mine = next((r for r in _rows(result, op=b["op"]) if (r["dtype"], r["numel"]) == (b["dtype"], b["numel"])),
                        None) if op is None else ours.get((b["dtype"], b["numel"], tuple(b["shape"])))
            if mine:
                pairs.append((b["us"] / mine["us"], _where(mine)))
        t.append(_min_ratio(f"{label} (speed-up)", goal, pairs))
    dq = _index(_rows(result, impl="dequantize + torch.matmul", family="gemv"))
    pairs = [(dq[k]["us"] / r["us"], _where(r)) for r in _rows(result, op="gemv nvfp4 x bf16")
             if (k := ("nvfp4 x bf16", r["numel"], tuple(r["shape"]))) in dq]
    t.append(_min_ratio("GEMV vs dequantize + torch.matmul (speed-up)", 3.0, pairs))
    t += _producers(result)
    every = [r for r in _rows(result, impl="fp4ops") if r["family"] != "nvfp4 recipe"]
    t.append(_min_pct("every fp4ops row (the H200 goal), % of its ceiling", 85, every))
    return t


def render(targets: list[Target]) -> str:
    from tabulate import tabulate

    marks = {True: "met", False: "NOT met", None: "not measured"}
    return tabulate([[x.name, x.goal, x.measured, x.worst, marks[x.met]] for x in targets],
                    headers=["target", "goal", "measured (worst case)", "worst case", "status"], tablefmt="github")
