"""Plans and their errors: stretto.PlanError carries the CLI's located diagnostics."""

import pathlib

import pytest

import stretto
from conftest import ROOT, cli_json, example_plans, run_cli

BAD = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/data/schedules/bad").glob("*.json"))


@pytest.mark.parametrize("plan", BAD)
def test_plan_error_text_is_the_clis(plan):
    cli = run_cli("simulate", plan, "--format", "json", check=False)
    assert cli.returncode == 2
    with pytest.raises(stretto.PlanError) as e:
        stretto.Plan.load(plan)
    assert e.value.text == cli.stderr
    assert str(e.value) == cli.stderr.rstrip("\n")
    assert e.value.diagnostics and all(d.text for d in e.value.diagnostics)


def test_diagnostic_fields():
    with pytest.raises(stretto.PlanError) as e:
        stretto.Plan.load("tests/data/schedules/bad/unknown_costmodel.json")
    (d,) = e.value.diagnostics
    assert (d.file, d.line, d.column, d.json_pointer) == (
        "tests/data/schedules/bad/unknown_costmodel.json", 4, 25, "/costmodel/kind")
    assert d.message == "unknown kind 'fixd'"
    assert d.hint == "did you mean 'fixed'?"
    assert d.severity == "error"
    assert '"kind": "fixd"' in d.source_line
    assert d.location == "tests/data/schedules/bad/unknown_costmodel.json:4:25 (/costmodel/kind)"
    assert isinstance(e.value, ValueError)


def test_from_dict_errors_point_into_the_document():
    doc = stretto.Plan.load("examples/cpu_gpt_pp2_1f1b.json").to_dict()
    doc["costmodel"] = {"kind": "fixd"}
    with pytest.raises(stretto.PlanError) as e:
        stretto.Plan.from_dict(doc, name="mine")
    (d,) = e.value.diagnostics
    assert d.file == "mine" and d.json_pointer == "/costmodel/kind" and d.line > 0
    assert d.hint == "did you mean 'fixed'?"


def test_missing_file_and_syntax_error(tmp_path):
    with pytest.raises(stretto.PlanError, match="no_such_plan.json"):
        stretto.Plan.load(tmp_path / "no_such_plan.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": {"family": "synthetic",}\n')
    with pytest.raises(stretto.PlanError) as e:
        stretto.Plan.load(bad)
    assert e.value.diagnostics[0].line == 1


def test_non_json_values_are_type_errors():
    with pytest.raises(TypeError):
        stretto.Plan.from_dict({"model": object()})
    with pytest.raises(TypeError):
        stretto.Plan.from_dict(["not", "a", "dict"])


def test_plan_properties():
    p = stretto.Plan.load("examples/gpt_pp4_dp2_1f1b.json")
    assert p.file == "examples/gpt_pp4_dp2_1f1b.json"
    assert p.base_dir == "examples"
    assert p.text == pathlib.Path("examples/gpt_pp4_dp2_1f1b.json").read_text()
    assert "gpt_pp4_dp2_1f1b" in repr(p)


@pytest.mark.parametrize("plan", example_plans())
def test_resolved_is_what_describe_prints(plan):
    expected = cli_json("describe", plan, "--format", "json")
    got = stretto.Plan.load(plan).resolved()
    assert got == expected
    assert got["plan"] == plan
