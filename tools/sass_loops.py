"""Main-loop lengths of the extension's kernels, read from their SASS: for each kernel whose
demangled name contains every PATTERN, the longest backward branch whose body holds a tensor-core
instruction (HMMA, HGMMA), with its instruction count and the count of a few kinds in it. The count
is static: a branch inside the loop that is skipped at run time still counts. A loop unrolled over
several steps (the warpgroup-MMA kernels' runs a ring's worth) reports them all: divide by its
steps. For the mma.sync linear kernels one iteration is one step, the number the notes on their
loops quote ("instructions a step per warp").

    python tools/sass_loops.py linear_mma_kernel "Nvfp4Format, __nv_bfloat16, 1, true"
    python tools/sass_loops.py --binary build/linear.o --arch sm_90a linear_wgmma_kernel

--binary: a shared object or object file with cubins (default: the installed fp4ops._C);
--arch: which cubin (default: sm_90a where present, else the first listed). Needs cuobjdump (the
CUDA toolkit or the nvidia-cuda-cuobjdump wheel); names are demangled with c++filt where found.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Instruction kinds counted in each loop: name -> opcode prefixes.
KINDS = {"HMMA": ("HMMA",), "HGMMA": ("HGMMA",), "shared loads": ("LDS", "LDSM"), "async copies": ("LDGSTS", "UBLKCP", "UTMALDG"),
         "barriers": ("BAR", "SYNCS", "WARPSYNC"), "global stores": ("STG",)}
TENSOR_CORE = ("HMMA", "HGMMA")


def find_tool(name: str) -> str | None:
    """`name` on PATH, in $CUDA_HOME/bin (or /usr/local/cuda/bin), or in an nvidia-* wheel's bin folder."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda") / "bin" / name]
    try:
        import nvidia

        candidates += [Path(p) / sub / "bin" / name for p in nvidia.__path__ for sub in ("cu13", "cu12", "")]
    except ImportError:
        pass
    return next((str(c) for c in candidates if c.exists()), None)


@dataclass
class Loop:
    kernel: str
    instructions: int
    kinds: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        counts = ", ".join(f"{name} {count}" for name, count in self.kinds.items() if count)
        return f"{self.kernel}: {self.instructions} instructions ({counts})"


def parse_functions(sass: str) -> dict[str, list[tuple[int, str]]]:
    """Mangled function name -> [(address, instruction text without the predicate's spacing)]."""
    functions: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in sass.splitlines():
        header = re.search(r"Function : (\S+)", line)
        if header:
            current = functions.setdefault(header[1], [])
            continue
        instruction = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if instruction and current is not None:
            current.append((int(instruction[1], 16), instruction[2]))
    return functions


def opcode(text: str) -> str:
    """The opcode of an instruction, its predicate (@P0, @!PT) dropped."""
    words = text.split()
    return words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")


def main_loop(instructions: list[tuple[int, str]]) -> list[str] | None:
    """The longest backward branch's body (target to branch, inclusive) that holds a tensor-core
    instruction (a warpgroup MMA where the function has one: an MXFP4 wgmma kernel's outside pass
    runs mma.sync after its main loop), or None. Branches placed after the function's last
    unpredicated EXIT are left out: ptxas puts cold paths there (an mbarrier wait's retry, which
    jumps back into the loop when it is done), and the span from their target to them covers the
    epilogue, not a loop."""
    index = {address: i for i, (address, _) in enumerate(instructions)}
    wanted = "HGMMA" if any(opcode(t).startswith("HGMMA") for _, t in instructions) else TENSOR_CORE
    exits = [i for i, (_, text) in enumerate(instructions) if text.split()[:1] == ["EXIT"]]
    end = exits[-1] if exits else len(instructions)
    best = None
    for i, (address, text) in enumerate(instructions[:end]):
        branch = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if not branch or opcode(text) != "BRA":
            continue
        target = int(branch[1], 16)
        if target >= address or target not in index:
            continue
        body = [t for _, t in instructions[index[target]: i + 1]]
        if any(opcode(t).startswith(wanted) for t in body) and (best is None or len(body) > len(best)):
            best = body
    return best


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt") or find_tool("cu++filt")
    if tool is None or not names:
        return {name: name for name in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {name: name for name in names}


def cubin_archs(cuobjdump: str, binary: Path) -> list[str]:
    """The architectures of `binary`'s cubins; none for a binary without device code (a CPU-only
    build), which cuobjdump reports with a failing exit status. Any other failure raises."""
    run = subprocess.run([cuobjdump, "--list-elf", str(binary)], check=False, capture_output=True, text=True)
    if run.returncode != 0:
        if "does not contain device code" in run.stdout + run.stderr:
            return []
        raise subprocess.CalledProcessError(run.returncode, run.args, run.stdout, run.stderr)
    return sorted(set(re.findall(r"\.(sm_\d+[af]?)\.cubin", run.stdout)))


def loops(binary: Path, arch: str, patterns: list[str], cuobjdump: str) -> list[Loop]:
    """The main loop of every kernel in `binary`'s `arch` cubin whose demangled name holds every pattern."""
    sass = subprocess.run([cuobjdump, "-sass", "-arch", arch, str(binary)], capture_output=True, text=True, check=True).stdout
    functions = parse_functions(sass)
    names = demangle(list(functions))
    found = []
    for mangled, instructions in functions.items():
        name = names[mangled]
        if not all(p in name for p in patterns):
            continue
        body = main_loop(instructions)
        if body is None:
            continue
        kinds = {kind: sum(opcode(t).startswith(prefixes) for t in body) for kind, prefixes in KINDS.items()}
        found.append(Loop(name, len(body), kinds))
    return sorted(found, key=lambda loop: loop.kernel)


def default_binary() -> Path:
    return Path(importlib.import_module("fp4ops._C").__file__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("patterns", nargs="*", help="substrings every reported kernel's demangled name holds")
    parser.add_argument("--binary", type=Path, default=None, help="shared object or object file (default: fp4ops._C)")
    parser.add_argument("--arch", default=None, help="cubin architecture, e.g. sm_90a (default: sm_90a where present)")
    args = parser.parse_args(argv)
    cuobjdump = find_tool("cuobjdump")
    if cuobjdump is None:
        print("cuobjdump not found (CUDA toolkit, or pip install nvidia-cuda-cuobjdump)", file=sys.stderr)
        return 2
    binary = args.binary or default_binary()
    archs = cubin_archs(cuobjdump, binary)
    arch = args.arch or ("sm_90a" if "sm_90a" in archs else (archs[0] if archs else None))
    if arch is None or arch not in archs:
        print(f"{binary}: no cubin for {arch or 'any architecture'} (it has {archs})", file=sys.stderr)
        return 2
    found = loops(binary, arch, args.patterns, cuobjdump)
    for loop in found:
        print(loop.line())
    if not found:
        print(f"no kernel with a tensor-core loop matches {args.patterns} in {binary} ({arch})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
