"""plan(), predict(), explain(), progress and experiments."""

import einsummable as es

# The keys of `einsummable plan --json` (src/report.rs, PlanReport).
PLAN_KEYS = [
    "workload", "devices", "optimizer", "cost_model", "unit", "total_cost", "total_bytes",
    "optimize_ms", "ops", "search", "topology", "schedule", "exchanges", "searched_ms", "predicted_ms", "bytes_moved", "compile_ms",
    "compile_error", "memory", "refinement", "rewrites",
]


def test_plan_has_the_cli_schema_and_agrees_with_predict():
    g = es.workloads.ffn(tokens=64, d_model=32, d_ff=128)
    exe = es.compile(g, devices=4, topology="dgx-h100", cost="proxy")
    plan = exe.plan()
    assert list(plan) == PLAN_KEYS
    assert (plan["devices"], plan["topology"], plan["cost_model"], plan["schedule"]) == (4, "dgx-h100", "proxy", "naive")
    assert plan["compile_error"] is None
    # The FFN's ReLU is weighed fused into the first matmul (kept fused or not).
    assert [c["rule"] for c in plan["rewrites"]] == ["epilogue"]
    assert (plan["exchanges"], plan["searched_ms"]) == ("naive", None)
    assert sorted(plan["ops"][0]) == ["cost", "kind", "name", "splits"]
    assert abs(plan["total_cost"] - sum(sum(o["cost"][k] for k in ("repartition", "join", "aggregation", "compute")) for o in plan["ops"])) <= 1e-9 * max(plan["total_cost"], 1)
    predicted = exe.predict()
    assert predicted["predicted_ms"] == plan["predicted_ms"]
    assert predicted["bytes_moved"] == plan["bytes_moved"]
    assert len(predicted["peak_bytes_per_device"]) == 4
    text = exe.explain()
    assert "logical plan (dp optimizer, proxy cost)" in text and "exchange programs:" in text
    for op in plan["ops"]:
        assert op["name"] in text


def test_progress_receives_the_stages():
    lines = []
    g = es.workloads.matmul(n=64)
    es.compile(g, devices=2, progress=lines.append)
    assert any("chose a spec per operator" in l for l in lines)
    assert any("compiled the task graph" in l for l in lines)


def test_experiment_runs_small(tmp_path):
    (result,) = es.experiment("chains", devices=[2], out=tmp_path, small=True, progress=lambda line: None)
    assert result["name"] and result["rows"] and len(result["files"]) == 3
    assert all((tmp_path / f.split("/")[-1]).exists() for f in result["files"])


def test_optimizers_table():
    names = [n for n, _ in es.optimizers()]
    assert names[:2] == ["dp", "greedy"] and "megatron" in names


def test_search_synthesizer_is_reported():
    g = es.workloads.ffn(tokens=64, d_model=32, d_ff=128)
    plan = es.compile(g, devices=4, synthesizer="search", seed=1).plan()
    assert plan["schedule"] == "search" and plan["predicted_ms"] > 0
    # the searched programs, or naive ones where the whole plan predicted faster with them
    assert (plan["exchanges"] == "searched") == (plan["searched_ms"] is None)
    # `schedule`, the keyword's other name, compiles the same plan
    assert es.compile(g, devices=4, schedule="search", seed=1).plan()["predicted_ms"] == plan["predicted_ms"]
