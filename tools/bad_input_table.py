"""Runs the bad-input matrix (tests/bad_inputs.py) on the devices this machine has and prints it
as Markdown for docs/reliability.md: a summary per kind, then every case with its outcome.

    python tools/bad_input_table.py > /tmp/table.md

Outcome per device: "raised" (the expected exception and message), "n/a" (the case needs devices
this machine lacks), or what happened instead (a different error, or no error at all)."""

from __future__ import annotations

import collections
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from bad_inputs import CASES, Inputs  # noqa: E402

DEVICE_COLUMNS = {"one": [("cpu", "cpu"), ("cuda", "cuda")], "mixed": [("cuda", "cpu"), ("cpu", "cuda")],
                  "two_gpus": [("cuda:1", "cuda:0")]}


def available(device: str) -> bool:
    if device == "cpu":
        return True
    index = int(device.partition(":")[2] or 0)
    return torch.cuda.device_count() > index


def outcome(case, device: str, other: str) -> str:
    if not (available(device) and available(other)):
        return "n/a"
    try:
        case.call(Inputs(device, other))
    except case.exception as error:
        if case.message in str(error):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return "raised"
        return f"wrong message: {str(error)[:80]}"
    except Exception as error:  # noqa: BLE001 - reported, not hidden
        return f"{type(error).__name__}: {str(error)[:80]}"
    return "NO ERROR"


def main() -> None:
    rows, by_kind = [], collections.defaultdict(collections.Counter)
    for case in CASES:
        results = [(f"{d}+{o}" if d != o else d, outcome(case, d, o)) for d, o in DEVICE_COLUMNS[case.devices]]
        for _, result in results:
            by_kind[case.kind][result if result in ("raised", "n/a") else "FAILED"] += 1
        where = ", ".join(f"{place}: {result}" for place, result in results)
        rows.append(f"| `{case.function}` | {case.kind} | {case.what} | {case.exception.__name__}: `{case.message}` | {where} |")
    print("| kind | cases | runs raised as expected | runs failed | runs n/a (devices missing) |")
    print("|---|---|---|---|---|")
    for kind, counts in by_kind.items():
        cases = sum(1 for case in CASES if case.kind == kind)
        print(f"| {kind} | {cases} | {counts['raised']} | {counts['FAILED']} | {counts['n/a']} |")
    print()
    print("| function | kind | bad input | raises (message contains) | outcome |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
