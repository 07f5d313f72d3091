"""docs/python.md's walk-through runs as written, and the type stubs name what the package has."""

import ast
import inspect
import re

import stretto
from conftest import ROOT


def test_walk_through_runs_as_written(capsys):
    text = (ROOT / "docs/python.md").read_text()
    cells = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(cells) >= 7
    namespace = {"__name__": "walk_through"}
    for i, cell in enumerate(cells):
        exec(compile(cell, f"docs/python.md cell {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    # The cells' claims hold: the error shown, the sweep's points, the front.
    assert "my-plan:5:25 (/costmodel/kind) unknown kind 'fixd' | did you mean 'fixed'?" in out
    assert "8 points simulated" in out
    assert "Pareto front (ms, GiB):" in out


def public_names(stub):
    tree = ast.parse((ROOT / "python/stretto" / stub).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):  # re-exports: `from .x import y as y`
            names.update(a.asname for a in node.names if a.asname == a.name)
    return {n for n in names if not n.startswith("_")}


def test_stubs_match_the_package():
    from stretto import builders

    assert public_names("__init__.pyi") == set(stretto.__all__)
    runtime = {n for n in dir(builders)
               if not n.startswith("_") and inspect.isfunction(getattr(builders, n))}
    assert public_names("builders.pyi") == runtime
