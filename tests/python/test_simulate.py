"""stretto.simulate gives the fields of `stretto simulate --format json`, value for value."""

import json

import pytest

import stretto
from conftest import ROOT, cli_json, example_plans

# Wall-clock time of the run itself: the only fields that differ between two runs.
WALL_CLOCK = {"sim_wall_ms"}


def without_wall_clock(fields):
    return {k: v for k, v in fields.items() if k not in WALL_CLOCK}


def test_there_are_example_plans():
    assert len(example_plans()) >= 10


# And a plan under a profiled cost table (its JSON adds table_coverage).
PROFILED = "tests/data/traces/options/plan.json"


@pytest.mark.parametrize("plan", example_plans() + [PROFILED])
def test_simulate_equals_cli_json(plan):
    expected = cli_json("simulate", plan, "--format", "json")
    got = stretto.simulate(plan)
    assert without_wall_clock(got.to_dict()) == without_wall_clock(expected)
    assert got.kind == "simulate"
    assert got.step_time_ms == expected["step_time_ms"]
    assert got["devices"] == expected["devices"]
    assert ("table_coverage" in got) == (plan == PROFILED)


def test_options_equal_cli_flags():
    plan = "examples/gpt_pp4_dp2_1f1b.json"
    expected = cli_json("simulate", plan, "--format", "json", "--critical-path=full", "--fold-replicas")
    got = stretto.simulate(stretto.Plan.load(plan), critical_path="full", fold_replicas=True)
    assert got.folded_replicas is True
    assert got["critical_path"] and got["critical_path_breakdown_ms"]
    assert without_wall_clock(got.to_dict()) == without_wall_clock(expected)
    summary = cli_json("simulate", plan, "--format", "json", "--critical-path")
    got = stretto.simulate(stretto.Plan.load(plan), critical_path=True)
    assert got["critical_path_summary"] and "critical_path" not in got
    assert without_wall_clock(got.to_dict()) == without_wall_clock(summary)
    with pytest.raises(ValueError):
        stretto.simulate(stretto.Plan.load(plan), critical_path="some")


def test_granularity_equals_cli_flag():
    # A plan whose pass-granularity step differs from op granularity (interference inside the
    # merged passes), so that an option dropped on the way to the engine shows.
    plan = "examples/gpt_pp4_dp2_1f1b.json"
    expected = cli_json("simulate", plan, "--format", "json", "--granularity", "pass")
    got = stretto.simulate(plan, granularity="pass")
    assert without_wall_clock(got.to_dict()) == without_wall_clock(expected)
    assert stretto.Plan.load(plan).simulate(granularity="pass").step_time_ms == got.step_time_ms
    op = stretto.simulate(plan, granularity="op")
    assert without_wall_clock(op.to_dict()) == without_wall_clock(stretto.simulate(plan).to_dict())
    assert op.step_time_ms != got.step_time_ms
    with pytest.raises(ValueError, match="granularity"):
        stretto.simulate(plan, granularity="layer")


def test_plan_from_dict_and_path_agree():
    plan = "examples/cpu_gpt_pp2_1f1b.json"
    doc = json.loads((ROOT / plan).read_text())
    a = stretto.simulate(plan).to_dict()
    b = stretto.simulate(stretto.Plan.from_dict(doc, name=plan)).to_dict()
    assert without_wall_clock(a) == without_wall_clock(b)
    assert stretto.Plan.load(plan).to_dict() == doc


def test_memory_curve_and_ops():
    r = stretto.simulate("examples/gpt_pp4_dp2_1f1b.json")
    for dev in r.devices:
        curve = r.memory_curve(dev["id"])
        total = list(curve["total"])
        # The curve's maximum is the device's peak, reached at the reported time.
        assert max(total) == dev["peak_memory_bytes"]
        first_peak = total.index(max(total))
        assert curve["t_ns"][first_peak] / 1e6 == pytest.approx(dev["peak_memory_time_ms"])
        cats = ["params", "grads", "optimizer", "activations", "comm_buffers", "grad_buckets",
                "gathered_params"]
        assert all(sum(curve[c][i] for c in cats) == total[i] for i in range(len(total)))
    ops = r.ops()
    names = ops["name"] if not isinstance(ops, list) else [o["name"] for o in ops]
    assert any(n.startswith("F mb") for n in names)
    ends = ops["end_ns"] if not isinstance(ops, list) else [o["end_ns"] for o in ops]
    assert max(ends) / 1e6 == pytest.approx(r.step_time_ms)


def test_numpy_arrays_when_numpy_is_present():
    np = pytest.importorskip("numpy")
    r = stretto.simulate("examples/cpu_gpt_pp2_1f1b.json")
    curve = r.memory_curve(0)
    assert isinstance(curve, np.ndarray) and curve.dtype["t_ns"] == np.int64
    ops = r.ops()
    assert isinstance(ops, np.ndarray)
    compute = ops[ops["kind"] == "compute"]
    busy0 = r.devices[0]["busy_ms"]
    # Compute ops of one device never overlap (one compute stream): their sum is its busy time.
    d0 = compute[compute["device"] == 0]
    assert (d0["end_ns"] - d0["start_ns"]).sum() / 1e6 == pytest.approx(busy0)


def test_lists_without_numpy(monkeypatch):
    # NumPy is optional: without it curves are dicts of lists and ops() a list of dicts.
    with_numpy = stretto.simulate("examples/cpu_gpt_pp2_1f1b.json")
    monkeypatch.setattr(stretto, "_np", None)
    r = stretto.simulate("examples/cpu_gpt_pp2_1f1b.json")
    curve, ops = r.memory_curve(0), r.ops()
    assert isinstance(curve, dict) and isinstance(curve["t_ns"], list)
    assert list(curve["total"]) == [int(v) for v in with_numpy.memory_curve(0)["total"]]
    assert isinstance(ops, list) and isinstance(ops[0], dict)
    assert set(ops[0]) == {"task", "device", "start_ns", "end_ns", "name", "stream", "kind"}
    assert op_rows(ops) == op_rows(with_numpy.ops())


def test_memory_curve_of_a_folded_replica_and_a_missing_device():
    r = stretto.simulate("examples/gpt_pp4_dp2_1f1b.json", fold_replicas=True, memory_curves=False)
    assert r.folded_replicas
    # Devices 0 and 4 hold the same stage (PP x DP): the folded one shows its representative's.
    assert list(r.memory_curve(4)["total"]) == list(r.memory_curve(0)["total"])
    with pytest.raises(IndexError):
        r.memory_curve(99)


def test_write_trace_equals_cli_trace(tmp_path):
    plan = "examples/cpu_gpt_pp2_1f1b.json"
    ours, theirs = tmp_path / "py.json", tmp_path / "cli.json"
    stretto.simulate(plan).write_trace(ours)
    cli_json("simulate", plan, "--format", "json", "--trace", theirs)
    assert json.loads(ours.read_text()) == json.loads(theirs.read_text())


def test_loaded_result_has_the_same_fields(tmp_path):
    plan = "examples/cpu_gpt_tp2.json"
    out = tmp_path / "r.json"
    from conftest import run_cli

    out.write_text(run_cli("simulate", plan, "--format", "json").stdout)
    loaded = stretto.Result.load(out)
    assert loaded.kind == "simulate"
    assert without_wall_clock(loaded.to_dict()) == without_wall_clock(stretto.simulate(plan).to_dict())
    with pytest.raises(ValueError, match="simulated here"):
        loaded.ops()


def trace_op_slices(path):
    """(device, start_ns, end_ns) of each op slice (compute or comm) of a Chrome trace."""
    events = json.loads(path.read_text())["traceEvents"]
    out = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("compute", "comm"):
            # ts and dur are microseconds with exact nanosecond digits ("12.345")
            start = round(float(e["ts"]) * 1000)
            out.append((e["pid"], start, start + round(float(e["dur"]) * 1000)))
    return sorted(out)


def op_rows(ops):
    rows = ops if isinstance(ops, list) else [dict(zip(ops.dtype.names, r)) for r in ops.tolist()]
    return sorted((int(o["device"]), int(o["start_ns"]), int(o["end_ns"])) for o in rows)


@pytest.mark.parametrize("fold", [False, True])
def test_ops_are_the_trace_slices_and_folded_devices_have_representatives(fold, tmp_path):
    plan = "examples/gpt_pp4_dp2_1f1b.json"
    r = stretto.simulate(plan, fold_replicas=fold)
    trace = tmp_path / "t.json"
    r.write_trace(trace)
    rows = op_rows(r.ops())
    assert rows == trace_op_slices(trace)
    reps = [r.representative(d["id"]) for d in r.devices]
    simulated = {d for d, rep in enumerate(reps) if rep == d}
    assert {d for d, _, _ in rows} == simulated
    if not fold:
        assert simulated == set(range(8))
        return
    # PP4 x DP2: one replica of each stage simulated; the other's rows are its representative's.
    assert len(simulated) == 4 and len(r.devices) == 8
    full = stretto.simulate(plan)
    full_rows = op_rows(full.ops())
    for d in range(8):
        rep = reps[d]
        assert r.devices[d]["busy_ms"] == r.devices[rep]["busy_ms"]
        assert list(r.memory_curve(d)["total"]) == list(r.memory_curve(rep)["total"])
        # Folding is exact: the folded replica's ops, simulated without folding, are its
        # representative's at the same times.
        assert [(s, e) for dev, s, e in full_rows if dev == d] == [(s, e) for dev, s, e in rows if dev == rep]
    with pytest.raises(IndexError):
        r.representative(8)
