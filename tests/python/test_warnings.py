"""The warnings `stretto simulate` prints on stderr are the library's (sim/warnings.h): the GUI
lists the same ones in its Diagnostics tab (and --dump-state), and stretto.simulate raises the
same ones as stretto.StrettoWarning, with the same words."""

import json
import shutil
import subprocess
import warnings

import pytest

import stretto
from conftest import BINARY, ROOT, UNDER_XVFB, run_cli

UNUSED = "tests/data/warnings/unused_devices.json"  # 12 devices, work on 8; stages imbalanced
PROFILED = "tests/data/traces/options/plan.json"  # a table that prices none of its ops
QUIET = "examples/layout_llama7b_pp4_dp4_interleaved.json"  # nothing to warn about

EXPECTED_CODES = {
    UNUSED: ["unused-devices", "compute-imbalance"],
    PROFILED: ["low-table-coverage"],
    QUIET: [],
}


def cli_warnings(plan):
    """(message, hint) of each warning `stretto simulate PLAN` prints on stderr."""
    err = run_cli("simulate", plan, "--format", "json").stderr.splitlines()
    out = []
    for i, line in enumerate(err):
        if line.startswith("warning: "):
            hint = err[i + 1] if i + 1 < len(err) else ""
            assert hint.startswith("  hint: "), err
            out.append((line[len("warning: "):], hint[len("  hint: "):]))
    return out


def python_warnings(plan, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = stretto.simulate(plan, **options)
    raised = [w.message for w in caught if issubclass(w.category, stretto.StrettoWarning)]
    assert [w.diagnostic for w in raised] == r.warnings
    for w in raised:
        assert str(w) == f"{w.diagnostic.message}\n  hint: {w.diagnostic.hint}"
        assert w.code == w.diagnostic.code and w.diagnostic.severity == "warning"
    return raised


def gui_warnings(plan, tmp_path):
    """(code, message, hint) of each warning the GUI's Diagnostics tab shows (--dump-state)."""
    if shutil.which("xvfb-run") is None:
        pytest.skip("xvfb-run not installed")
    script, state = tmp_path / "diag.script", tmp_path / "state.json"
    script.write_text("wait\nclick tab diagnostics\nframes 2\n")
    # scripts/under_xvfb.sh: xvfb-run's own exit codes and display races kept out
    cmd = [UNDER_XVFB, "--screen", "1280x800x24", BINARY, "gui", plan, "--script",
           str(script), "--frames", "2", "--size", "1280x800", "--dump-state", str(state)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    st = json.loads(state.read_text())
    assert not st["failed"] and not st["stale"], st
    return [(d["code"], d["message"], d["hint"]) for d in st["diagnostics"] if d["severity"] == "warning"]


@pytest.mark.parametrize("plan", list(EXPECTED_CODES))
def test_cli_python_and_gui_show_the_same_warnings(plan, tmp_path):
    cli = cli_warnings(plan)
    raised = python_warnings(plan)
    assert [w.code for w in raised] == EXPECTED_CODES[plan]
    assert [(w.diagnostic.message, w.diagnostic.hint) for w in raised] == cli
    assert gui_warnings(plan, tmp_path) == [(w.code, m, h) for w, (m, h) in zip(raised, cli)]


def test_warnings_name_what_is_wrong_and_where():
    raised = python_warnings(UNUSED)
    unused, imbalance = (w.diagnostic for w in raised)
    assert unused.message == "the plan never uses 4 of the cluster's 12 devices (8-11)"
    assert unused.file == UNUSED and unused.json_pointer == "/cluster"
    assert imbalance.message.startswith("compute is imbalanced across devices: device 3")
    assert imbalance.json_pointer == "/schedule"
    cov = python_warnings(PROFILED)[0].diagnostic
    assert cov.message.startswith("the profiled table covers 0.0 % of the plan (0 of ")
    assert cov.json_pointer == "/costmodel"


def test_folding_keeps_the_warnings_and_a_loaded_result_has_none(tmp_path):
    folded = python_warnings(UNUSED, fold_replicas=True)
    assert [w.code for w in folded] == EXPECTED_CODES[UNUSED]
    # The filter the user sets applies: "error" turns the first warning into an exception.
    with warnings.catch_warnings():
        warnings.simplefilter("error", stretto.StrettoWarning)
        with pytest.raises(stretto.StrettoWarning, match="never uses 4"):
            stretto.simulate(UNUSED)
    out = tmp_path / "r.json"
    out.write_text(run_cli("simulate", UNUSED, "--format", "json").stdout)
    assert stretto.Result.load(out).warnings == []
