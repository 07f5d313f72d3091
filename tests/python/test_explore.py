"""Sweeps, search and loaded validation results, against the CLI's JSON."""

import json

import pytest

import stretto
from conftest import ROOT, cli_json

SPEC = "examples/sweeps/interconnect.json"
TIMES = {"wall_ms", "sim_wall_ms", "estimate_s", "simulate_s", "search_s"}


def strip_times(v):
    if isinstance(v, dict):
        return {k: strip_times(x) for k, x in v.items() if k not in TIMES}
    if isinstance(v, list):
        return [strip_times(x) for x in v]
    return v


def test_sweep_rows_equal_the_clis(tmp_path):
    summary = stretto.sweep(SPEC, db=tmp_path / "py.db", jobs=2)
    assert summary["points"] == 8 and summary["run"] == 8 and summary["ok"] == 8
    again = stretto.sweep(SPEC, db=tmp_path / "py.db", jobs=2)
    assert again["resumed"] == 8 and again["run"] == 0
    cli = cli_json("sweep", SPEC, "--db", tmp_path / "cli.db", "-j", 2, "--format", "json")
    ours = stretto.sweep_results(tmp_path / "py.db", frame=False, flat=False)
    key = lambda r: r["hash"]
    assert sorted(map(strip_times, ours), key=key) == sorted(map(strip_times, cli["results"]), key=key)


def test_sweep_from_a_dict_spec(tmp_path):
    spec = json.loads((ROOT / SPEC).read_text())
    spec["axes"] = {"microbatch_size": [1, 2]}
    with pytest.raises(ValueError, match="db="):
        stretto.sweep(spec)
    summary = stretto.sweep(spec, db=tmp_path / "d.db", jobs=1, base_dir=ROOT / "examples/sweeps")
    assert summary["points"] == 2
    rows = stretto.sweep_results(tmp_path / "d.db", frame=False)
    assert sorted(r["microbatch_size"] for r in rows) == [1, 2]
    assert all(r["status"] == "ok" and r["step_time_ms"] > 0 for r in rows)


def test_sweep_spec_errors_are_located(tmp_path):
    spec = json.loads((ROOT / SPEC).read_text())
    spec["axes"] = {"microbatch_sise": [1, 2]}
    with pytest.raises(stretto.PlanError) as e:
        stretto.sweep(spec, db=tmp_path / "e.db", base_dir=ROOT / "examples/sweeps")
    assert e.value.diagnostics[0].json_pointer.startswith("/axes")


def test_sweep_results_as_a_dataframe(tmp_path):
    pd = pytest.importorskip("pandas")
    stretto.sweep(SPEC, db=tmp_path / "f.db", jobs=2)
    df = stretto.sweep_results(tmp_path / "f.db")
    assert isinstance(df, pd.DataFrame) and len(df) == 8
    assert {"hash", "microbatch_size", "/cluster/intra_node/bandwidth_GBps", "status",
            "step_time_ms", "peak_memory_bytes"} <= set(df.columns)
    rows = stretto.sweep_results(tmp_path / "f.db", frame=False)
    assert sorted(df["step_time_ms"]) == sorted(r["step_time_ms"] for r in rows)


def test_sweep_results_without_pandas(tmp_path, monkeypatch):
    # pandas is optional: without it sweep_results gives the list, and frame=True says why not.
    import builtins

    stretto.sweep(SPEC, db=tmp_path / "f.db", jobs=2)
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    rows = stretto.sweep_results(tmp_path / "f.db")
    assert isinstance(rows, list) and len(rows) == 8 and "step_time_ms" in rows[0]
    with pytest.raises(ImportError):
        stretto.sweep_results(tmp_path / "f.db", frame=True)


def test_search_equals_the_clis():
    plan = "examples/cpu_gpt_pp2_1f1b.json"
    cli = cli_json("search", plan, "--devices", 2, "--budget", 60, "-j", 1, "--format", "json")
    ours = stretto.search(plan, devices=2, budget_s=60, jobs=1)
    best_plan = ours.pop("best_plan")
    assert strip_times(ours) == strip_times(cli)
    # The emitted plan simulates to the best point's step time.
    r = stretto.simulate(best_plan, fold_replicas=True)
    assert r.step_time_ms == pytest.approx(ours["best"]["metrics"]["step_time_ms"])


def test_validation_results_load_as_results():
    path = "bench/gpu/results/h200_validate_separate_profile.json"
    doc = json.loads((ROOT / path).read_text())
    rows = stretto.load_validation(path)
    assert len(rows) == len(doc["plans"])
    for row, entry in zip(rows, doc["plans"]):
        m, p = row["measured"], row["predicted"]
        assert isinstance(m, stretto.Result) and isinstance(p, stretto.Result)
        assert (m.kind, p.kind) == ("measured", "predicted")
        assert m.step_time_ms == entry["a"]["step_time_ms"]
        assert p.step_time_ms == entry["b"]["step_time_ms"]
        assert row["step_err_pct"] == entry["step_err_pct"]
        assert [d["id"] for d in m.devices] == [d["id"] for d in entry["devices"]]
        assert m.devices[0]["busy_ms"] == entry["devices"][0]["a"]["busy_ms"]


def test_replay_json_loads_as_a_result(tmp_path):
    import pathlib

    from conftest import BINARY, run_cli

    if not pathlib.Path(BINARY).with_name("stretto-backend").exists():
        pytest.skip("built without the LibTorch backend (STRETTO_WITH_TORCH)")
    plan = "tests/data/loop/dp2_tiny.json"
    out = tmp_path / "replay.json"
    out.write_text(run_cli("replay", plan, "--device", "cpu", "--format", "json").stdout)
    measured, predicted = stretto.Result.load(out), stretto.simulate(plan)
    assert (measured.kind, predicted.kind) == ("replay", "simulate")
    # Measured and predicted steps under the same names, per step and per device.
    shared = {"plan", "step_time_ms", "bubble_ratio", "exposed_comm_ms", "devices"}
    assert shared <= set(measured) and shared <= set(predicted)
    device_fields = {"id", "busy_ms", "bubble_ms", "bubble_ratio", "exposed_comm_ms", "comm_ms",
                     "peak_memory_bytes", "memory_breakdown"}
    assert device_fields <= set(measured.devices[0]) & set(predicted.devices[0])
    assert measured.step_time_ms > 0 and len(measured.devices) == len(predicted.devices)
