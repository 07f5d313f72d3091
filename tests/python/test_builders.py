"""Builders as functions, and builders written in Python (validated like any plan)."""

import json

import pytest

import stretto
from stretto import builders
from conftest import ROOT, cli_json

SYNTHETIC_2DEV = {
    "model": {"family": "synthetic", "layers": 4, "pp_regions": 2, "activation_bytes": 1048576,
              "param_bytes": 4194304, "boundary_bytes": 65536, "flops": 1e9},
    "cluster": {"preset": "h100-sxm", "nodes": 1, "devices_per_node": 2},
    "costmodel": {"kind": "fixed", "F": 1, "B": 2, "BI": 1, "BW": 1, "comm": 0, "unit": "ms"},
}


def test_every_family_has_a_function():
    assert "dualpipev" in builders.families()
    for fam in builders.families():
        name = {"1f1b": "one_f_one_b", "interleaved-1f1b": "interleaved_1f1b"}.get(
            fam, fam.replace("-", "_"))
        assert callable(getattr(builders, name))


def test_builder_equals_cli_build_schedule():
    got = builders.dualpipev(ranks=4, microbatches=16)
    assert got == cli_json("build-schedule", "--schedule", "dualpipev", "--ranks", 4, "--microbatches", 16)
    assert builders.build("ScheduleInterleaved1F1B", ranks=2, microbatches=4) == cli_json(
        "build-schedule", "--schedule", "interleaved-1f1b", "--ranks", 2, "--microbatches", 4)


def test_builder_with_base_simulates_as_the_plans_builder_call():
    path = "examples/gpt_pp4_dp2_1f1b_builder.json"
    doc = json.loads((ROOT / path).read_text())
    call = doc["schedule"]
    directives = builders.one_f_one_b(ranks=call["ranks"], microbatches=call["microbatches"],
                                      base=call["base"])
    ours = stretto.simulate(stretto.Plan.from_dict(dict(doc, schedule=directives))).to_dict()
    theirs = stretto.simulate(path).to_dict()
    for r in (ours, theirs):
        del r["plan"], r["sim_wall_ms"]
    assert ours == theirs


def test_builder_with_layout():
    ds = builders.dualpipev(microbatches=8, layout={"pp": 4, "dp": 1})
    assert any(d["op"] == "order" for d in ds)


def test_builder_errors_point_into_the_call():
    with pytest.raises(stretto.PlanError) as e:
        builders.dualpipev(ranks=4, microbatches=3)
    d = e.value.diagnostics[0]
    assert d.json_pointer == "/microbatches"
    assert d.line > 0 and d.hint
    with pytest.raises(stretto.PlanError) as e:
        builders.one_f_one_b(ranks=2, microbatches=4,
                             base=[{"op": "place", "filter": {"PP": 0}, "devices": [0]},
                                   {"op": "plcae", "filter": {"PP": 1}, "devices": [1]}])
    assert e.value.diagnostics[0].json_pointer.startswith("/base/1")
    with pytest.raises(stretto.PlanError, match="unknown|family|builder"):
        builders.build("not-a-schedule", ranks=2, microbatches=4)


def pipeline_2dev(microbatches, stage1_order):
    """A Python builder (as Piper's are written): two stages on two devices, stage 0 running
    1F1B over `microbatches`, stage 1 running its ops in `stage1_order` ([(mb, pass), ...])."""
    ds = [
        {"op": "place", "filter": {"PP": 0}, "devices": [0], "stream": "pp"},
        {"op": "place", "filter": {"PP": 1}, "devices": [1], "stream": "pp"},
        {"op": "split", "filter": {}, "dim_name": "MB", "num_microbatches": microbatches},
    ]
    stage0 = [[{"PP": 0, "MB": mb, "PASS": p}] for mb in range(microbatches) for p in ("F", "B")]
    ds.append({"op": "order", "filters": stage0})
    ds.append({"op": "order", "filters": [[{"PP": 1, "MB": mb, "PASS": p}] for mb, p in stage1_order]})
    return ds


def test_python_builder_compiles_like_a_plan():
    plan = stretto.Plan.from_builder(SYNTHETIC_2DEV, pipeline_2dev, 2,
                                     [(0, "F"), (0, "B"), (1, "F"), (1, "B")])
    assert plan.file == "<builder pipeline_2dev>"
    r = stretto.simulate(plan)
    # Fixed costs (F 1 ms, B 2 ms) on two stages run strictly one after another: 4 x 3 ms.
    assert r.step_time_ms == pytest.approx(12.0)


def test_python_builder_that_deadlocks_is_refused_with_a_located_message():
    # Stage 1 runs both forwards before any backward while stage 0 waits for B(mb0) before
    # F(mb1): the orders wait on each other across the devices.
    with pytest.raises(stretto.PlanError) as e:
        stretto.Plan.from_builder(SYNTHETIC_2DEV, pipeline_2dev, 2,
                                  [(0, "F"), (1, "F"), (0, "B"), (1, "B")])
    d = e.value.diagnostics[0]
    assert "deadlock" in d.message
    assert d.file == "<builder pipeline_2dev>"
    assert d.json_pointer == "/schedule/3" and d.directive == 3
    # One directive per line: the line shown is the order directive at fault.
    assert d.line == 6 + 3 and d.source_line.strip().startswith('{"op": "order"')
    assert [n.json_pointer for n in d.notes] == ["/schedule/4"]
    assert "<builder pipeline_2dev>:9:5 (/schedule/3): error: deadlock" in str(e.value)


def test_python_builder_that_contradicts_dataflow_is_refused_with_a_located_message():
    # Stage 1 orders microbatch 0's backward before its forward, which the backward needs.
    with pytest.raises(stretto.PlanError) as e:
        stretto.Plan.from_builder(SYNTHETIC_2DEV, pipeline_2dev, 2,
                                  [(0, "B"), (0, "F"), (1, "F"), (1, "B")])
    d = e.value.diagnostics[0]
    assert d.message.startswith("order contradicts dataflow")
    assert d.file == "<builder pipeline_2dev>"
    assert d.json_pointer == "/schedule/4" and d.directive == 4
    assert d.line == 6 + 4 and d.source_line.strip().startswith('{"op": "order"')
    assert "<builder pipeline_2dev>:10:5 (/schedule/4): error: order contradicts dataflow" in str(e.value)


def test_python_builder_must_return_a_list():
    with pytest.raises(TypeError, match="not a list"):
        stretto.Plan.from_builder(SYNTHETIC_2DEV, lambda: {"op": "place"})
