"""Shared fixtures of the Python package's tests.

Run through ctest (tests/python/tests.cmake sets PYTHONPATH to build/python and names the
`stretto` binary), or by hand from the repository root:
    PYTHONPATH=build/python STRETTO_BINARY=build/stretto python3 -m pytest tests/python
"""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(os.environ.get("STRETTO_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BINARY = os.environ.get("STRETTO_BINARY", str(ROOT / "build" / "stretto"))
UNDER_XVFB = os.environ.get("STRETTO_UNDER_XVFB", str(ROOT / "scripts" / "under_xvfb.sh"))


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    # Plans name each other and their tables by relative paths, as in the CLI's examples.
    monkeypatch.chdir(ROOT)


def run_cli(*args, check=True):
    """Runs the `stretto` binary from the repository root; returns the CompletedProcess."""
    p = subprocess.run([BINARY, *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"stretto {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr}")
    return p


def cli_json(*args):
    return json.loads(run_cli(*args).stdout)


def example_plans():
    """Every plan in examples/ (relative paths, as a user types them)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.json"))
