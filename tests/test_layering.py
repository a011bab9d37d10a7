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
