"""The package's modules import cleanly, and their imports form layers, not circles.

Every module (found by walking the package folder) is imported in a fresh interpreter. The import
statements of every module, at any depth (inside functions too), make a graph that must have no
cycle: _formats <- _shapes <- _checks <- tensor <- ops <- gemv <- nn / checkpoint. The oracle
(`fp4ops.reference` and its private parts, `_reference_*`) must import nothing else from fp4ops:
it is the independent statement of the contract that the product is tested against."""

from __future__ import annotations

import ast
import concurrent.futures
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = "fp4ops"
PACKAGE_DIR = pathlib.Path(importlib.util.find_spec(PACKAGE).submodule_search_locations[0])
LAB_SUBPACKAGES = ("bench",)  # the benchmark suite's old home inside the package, if still there


def package_modules() -> dict[str, pathlib.Path]:
    """Dotted name -> source file of every module of the package."""
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
        if parts[0] in LAB_SUBPACKAGES:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((PACKAGE, *parts))] = path
    return modules


MODULES = package_modules()
ORACLE = {name for name in MODULES if name.split(".")[1:2] == ["reference"] or name.split(".")[-1].startswith("_reference")}


def resolve_imports(name: str, source: str, known) -> set[str]:
    """The fp4ops modules (or, for names outside `known`, the fp4ops names) that the module `name`
    imports anywhere in `source`. `from X import a` counts as importing X.a when that is a module
    in `known`, else as importing X. The parent packages every import runs first are left out:
    Python has them half-initialised already, so they close no circle."""
    is_package = name == PACKAGE or MODULES.get(name, pathlib.Path()).name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {t for t in targets if t == PACKAGE or t.startswith(PACKAGE + ".")}


GRAPH = {name: resolve_imports(name, path.read_text(), MODULES) for name, path in MODULES.items()}


def test_the_walk_finds_the_layers_and_the_oracle():
    for name in ("fp4ops", "fp4ops._formats", "fp4ops._shapes", "fp4ops._checks", "fp4ops.tensor", "fp4ops.ops",
                 "fp4ops.gemv", "fp4ops.nn", "fp4ops.checkpoint", "fp4ops.reference"):
        assert name in MODULES
    assert "fp4ops.reference" in ORACLE and "fp4ops.ops" not in ORACLE
    assert "fp4ops.tensor" in GRAPH["fp4ops.ops"] and "fp4ops._formats" in GRAPH["fp4ops._checks"]


def test_the_parser_sees_every_form_of_import():
    source = ("import torch\n"
              "from . import ops, _meta as meta\n"
              "from .tensor import NVFP4Tensor\n"
              "import fp4ops.gemv\n"
              "def f():\n"
              "    from fp4ops import nn\n"
              "    if True:\n"
              "        from ._shapes import packed_shape\n")
    assert resolve_imports("fp4ops.demo", source, MODULES) == {
        "fp4ops.ops", "fp4ops._meta", "fp4ops.tensor", "fp4ops.gemv", "fp4ops.nn", "fp4ops._shapes"}
    # relative to a package's __init__, and two levels up from inside a subpackage
    assert resolve_imports("fp4ops", "from .ops import amax\nfrom . import BUILD\n", MODULES) == {"fp4ops.ops", "fp4ops"}
    assert resolve_imports("fp4ops.sub.mod", "from .. import ops\nfrom ..tensor import MXFP4Tensor\n", MODULES) == {
        "fp4ops.ops", "fp4ops.tensor"}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as [a, b, ..., a], or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in graph:
                continue
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circles():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH))


def test_the_oracle_imports_nothing_else_from_the_package():
    leaks = {name: sorted(GRAPH[name] - ORACLE) for name in sorted(ORACLE) if GRAPH[name] - ORACLE}
    assert not leaks, f"the reference must state the contract on its own, but imports {leaks}"


def test_the_product_does_not_build_on_the_oracle():
    """Only the package's __init__ imports the reference (to make it public); a kernel argument
    built from the oracle would make the tests compare the product with itself."""
    users = sorted(name for name in MODULES if name not in ORACLE and name != PACKAGE and GRAPH[name] & ORACLE)
    assert not users


def test_no_module_imports_a_private_name_of_another():
    """Private modules (_formats, _checks, ...) are fine to import; a private name in another
    module is that module's business."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE)):
                found += [f"{name}: {alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not any(m.endswith("." + alias.name) for m in MODULES)]
    assert not found


def _import_in_fresh_interpreter(module: str) -> subprocess.CompletedProcess:
    # Run next to the package this test process imported, so the child imports the same one.
    return subprocess.run([sys.executable, "-c", f"import {module}"], cwd=PACKAGE_DIR.parent,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, subprocess.CompletedProcess]:
    """One interpreter per module (`__main__` runs the demo when imported), a few at a time."""
    modules = [m for m in MODULES if m.split(".")[-1] != "__main__"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(modules, pool.map(_import_in_fresh_interpreter, modules)))


@pytest.mark.parametrize("module", [m for m in MODULES if m.split(".")[-1] != "__main__"])
def test_module_imports_in_a_fresh_interpreter(fresh_imports, module):
    result = fresh_imports[module]
    assert result.returncode == 0, f"import {module} failed:\n{result.stderr}"


def test_the_checkpoint_module_is_an_attribute_after_a_plain_import():
    """The README calls fp4ops.checkpoint.load after `import fp4ops`; the module (safetensors
    behind it) is imported on that first use, not by `import fp4ops`."""
    script = ("import sys, fp4ops; assert 'fp4ops.checkpoint' not in sys.modules; "
              "assert callable(fp4ops.checkpoint.load); assert not hasattr(fp4ops, 'no_such_name')")
    result = subprocess.run([sys.executable, "-c", script], cwd=PACKAGE_DIR.parent, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
