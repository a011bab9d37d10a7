"""The layering DESIGN.md 1.1 states, read from the sources' import statements (those
inside functions too): ``snm -> pipelines -> snm_core``, ``snm_core`` never importing
Beam, and inside it ``io <- text <- stages <- count, join, fit <- apply, scoring, arpa <- prune,
sample <- loglinear``: the stage chain."""

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
#: A subpackage of snm_core imports only those of a lower rank.
RANK = {"io": 0, "text": 1, "stages": 2, "count": 3, "join": 3, "fit": 3, "apply": 4,
        "scoring": 4, "arpa": 4, "prune": 5, "sample": 5, "loglinear": 6}


def imports(package):
    """``{(importing module's path, imported module)}`` of every module under ``package``."""
    found = set()
    for directory, _, files in os.walk(os.path.join(ROOT, package)):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add((os.path.relpath(path, ROOT), node.module))
                elif isinstance(node, ast.Import):
                    found.update((os.path.relpath(path, ROOT), a.name) for a in node.names)
    return found


def top(module):
    return module.split(".")[0]


@pytest.mark.parametrize("package, forbidden", [
    ("snm_core", ("apache_beam", "pipelines", "snm")),
    ("pipelines", ("snm",)),
])
def test_imports_go_one_way(package, forbidden):
    wrong = sorted((path, module) for path, module in imports(package)
                   if top(module) in forbidden)
    assert not wrong


def test_snm_core_subpackages_import_only_those_below_them():
    wrong = []
    for path, module in imports("snm_core"):
        parts = path.split(os.sep)
        if len(parts) < 3 or not module.startswith("snm_core."):
            continue  # snm_core/__init__.py and the like, or another package
        importer, imported = parts[1], module.split(".")[1]
        if imported in RANK and importer != imported and RANK[imported] >= RANK[importer]:
            wrong.append((path, module))
    assert not sorted(wrong)


def test_only_the_log_linear_family_takes_numba():
    """numba is the extra ``loglinear``'s: only ``loglinear/family.py`` imports it (for that
    family's modules), and no module outside ``snm_core/loglinear`` imports one of them at
    module level."""
    takers = sorted({path for package in ("snm_core", "pipelines", "snm")
                     for path, module in imports(package)
                     if top(module) in ("numba", "llvmlite")})
    assert takers == [os.path.join("snm_core", "loglinear", "family.py")]


#: Imports every module of the package with numba made unimportable (as where the extra
#: ``loglinear`` is not installed), except the log-linear family's own, and prints those
#: that fail.
WITHOUT_NUMBA = r"""
import importlib, pkgutil, sys
sys.modules["numba"] = None  # import numba raises ImportError
failed = []
for package in ("snm_core", "pipelines", "snm"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if (info.name.endswith(".__main__") or info.name.startswith("snm_core.loglinear.")
                and info.name != "snm_core.loglinear.family"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            failed.append(f"{info.name}: {e}")
print("\n".join(failed))
"""


def test_everything_but_the_log_linear_family_runs_without_numba(tmp_path):
    """Without numba every other module loads (counting, training, scoring, decoding, ARPA,
    pruning, sampling, the commands), and ``snm train --family loglinear`` says in one
    line, before any stage runs, what to install."""
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-c", WITHOUT_NUMBA], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    assert run.stdout.strip() == ""
    text = tmp_path / "train.txt"
    text.write_text("a b c\n")
    files = ["--config", "5gram", "--train", str(text), "--heldout", str(text), "--test",
             str(text)]
    train = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['numba'] = None; "
         "from snm.cli import entry; sys.argv[0] = 'snm'; sys.exit(entry())", "train",
         "--family", "loglinear", *files, "--out", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=tmp_path)
    assert train.returncode == 2
    assert train.stderr.strip().splitlines() == [
        "snm train: error: the log-linear family's loops need numba, which is not installed: "
        "pip install 'snm-lm[loglinear]'"]
    assert not list((tmp_path / "run").glob("*"))  # nothing written
