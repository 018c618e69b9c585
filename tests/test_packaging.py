"""The wall between the product and the lab: nothing under python/fp4ops imports benchmarks/, the
wheel holds the package and nothing else, and no module only the lab imports is a dependency of
the package (the lab's tools are in the "bench" extra).

The wheel check needs a built wheel: FP4OPS_WHEEL names the .whl file or a folder holding one
(.ci/run builds a CPU-only wheel for it); without it that test skips."""

from __future__ import annotations

import ast
import email
import fnmatch
import os
import pathlib
import re
import sys
import zipfile

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "fp4ops"
LAB_DIR = ROOT / "benchmarks"
LAB = ("benchmarks", "fp4ops.bench")


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def imported_modules(path: pathlib.Path, package_dir: pathlib.Path = PACKAGE) -> set[str]:
    """Every module a source file of the package in package_dir imports, relative imports made
    absolute, plus the string arguments of importlib.import_module / __import__ calls."""
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(path.parent.relative_to(package_dir.parent).parts)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)  # `from . import bench`
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
            found.add(node.args[0].value)
    return found


def product_sources() -> list[pathlib.Path]:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 5 and PACKAGE / "__init__.py" in sources
    return sources


def top_level_imports(package_dir: pathlib.Path) -> set[str]:
    return {m.split(".")[0] for path in package_dir.rglob("*.py") for m in imported_modules(path, package_dir)}


def lab_only_modules() -> set[str]:
    """Third-party modules the lab imports and the product does not. tabulate, matplotlib and tqdm
    are not among them: the demo and the checkpoint quantizer use them too."""
    if not LAB_DIR.is_dir():
        pytest.skip("no benchmarks/ here (an sdist ships tests/ without the lab)")
    lab = top_level_imports(LAB_DIR)
    assert {"fp4ops", "torch", "matplotlib"} <= lab
    return lab - top_level_imports(PACKAGE) - set(sys.stdlib_module_names) - {"fp4ops", "benchmarks", "__future__"}


def test_the_import_scan_sees_relative_and_dynamic_imports(tmp_path):
    package = tmp_path / "fp4ops"
    (package / "sub").mkdir(parents=True)
    (package / "cli.py").write_text("from . import bench\nfrom .bench.cases import x\nimport importlib\n"
                                    "importlib.import_module('benchmarks.suite')\n")
    (package / "sub" / "mod.py").write_text("from ..bench import harness\nfrom benchmarks import ab_bench\n")
    assert {"fp4ops.bench", "fp4ops.bench.cases", "benchmarks.suite"} <= imported_modules(package / "cli.py", package)
    assert {"fp4ops.bench.harness", "benchmarks"} <= imported_modules(package / "sub" / "mod.py", package)


def test_product_never_imports_the_lab():
    offenders = {}
    for path in product_sources():
        bad = sorted(m for m in imported_modules(path) if any(m == lab or m.startswith(lab + ".") for lab in LAB))
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert not offenders, f"the product imports the lab: {offenders}"
    # (a stale checkout may keep an untracked __pycache__ there; sources are what count)
    assert not list((PACKAGE / "bench").glob("*.py")), "python/fp4ops/bench: the suite lives in benchmarks/suite"


def test_pyproject_packages_only_fp4ops():
    setuptools = pyproject()["tool"]["setuptools"]
    assert setuptools["packages"] == ["fp4ops"]
    assert setuptools["package-dir"] == {"": "python"}
    assert "benchmarks" not in repr(setuptools.get("package-data", {}))
    manifest = ROOT / "MANIFEST.in"
    assert not manifest.exists() or "benchmarks" not in manifest.read_text()


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("-", "_")


def test_no_dependency_is_the_labs_alone():
    """What only benchmarks/ imports belongs in the "bench" extra, never in `dependencies`."""
    lab_only = lab_only_modules()
    assert "pytest" in lab_only  # the lab's tests: the product never imports it
    names = {requirement_name(r) for r in pyproject()["project"]["dependencies"]}
    assert "torch" in names
    assert not lab_only & names, f"dependencies only the lab imports (move them to the bench extra): {lab_only & names}"


def wheel_path() -> pathlib.Path:
    given = os.environ.get("FP4OPS_WHEEL")
    if not given:
        pytest.skip("FP4OPS_WHEEL is not set (a built wheel, or a folder holding one)")
    path = pathlib.Path(given)
    if path.is_dir():
        wheels = sorted(path.glob("fp4ops-*.whl"))
        assert len(wheels) == 1, f"{path}: expected one fp4ops wheel, found {[w.name for w in wheels]}"
        path = wheels[0]
    assert path.is_file(), f"FP4OPS_WHEEL={given}: no such wheel"
    return path


def test_wheel_ships_the_package_and_no_lab():
    with zipfile.ZipFile(wheel_path()) as wheel:
        names = wheel.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(wheel.read(metadata_name))
    assert {n.split("/")[0] for n in names} == {"fp4ops", metadata_name.split("/")[0]}
    assert fnmatch.filter(names, "fp4ops/_C*.so"), "the wheel has no compiled fp4ops._C"
    assert "fp4ops/__init__.py" in names and "fp4ops/reference.py" in names
    lab = [n for n in names if "bench" in n.lower() or n.endswith((".cu", ".cuh"))]
    assert not lab, f"lab files in the wheel: {lab}"
    unconditional = [r for r in metadata.get_all("Requires-Dist", []) if "extra ==" not in r]
    expected = sorted(requirement_name(r) for r in pyproject()["project"]["dependencies"])
    assert sorted(requirement_name(r) for r in unconditional) == expected
    assert not lab_only_modules() & set(expected)
