//! `einsummable experiment`: every experiment runs with `--small` and writes its CSV,
//! Markdown and SVG with the expected rows and columns; a strategy that cannot plan a
//! workload is an `n/a` cell with its reason.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use einsum_logical::{LogicalOptimizer, Problem};
use einsummable::experiment::{Case, Cell, CostModels, Experiment, Runner, Setup, Strategy, Table};
use einsummable::{NaiveSynthesizer, experiment};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("einsummable-experiment-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The CSV's header and rows, split on commas (the labels these tables use have none).
fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines().map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>());
    let header = lines.next().expect("a header line");
    (header, lines.collect())
}

/// The expected (columns, row count) of each experiment with devices 1,2.
fn expected(name: &str) -> (Vec<&'static str>, usize) {
    match name {
        // The command line adds the joint optimizer of form and decomposition.
        "transformer" => {
            (vec!["workload", "p", "dp", "data", "megatron", "ulysses", "mesh2d", "dp+rewrites"], 2 * (5 + 1))
        }
        "chains" => (vec!["workload", "p", "dp", "data", "mesh2d", "megatron", "ulysses", "dp+rewrites"], 2 * 5),
        "ablation" => (vec!["family", "workload", "dp", "greedy", "random best", "random median", "dp naive"], 12),
        "exchange" => (vec!["topology", "family", "workload", "naive", "search", "speedup"], 2 * 12),
        "proxy" => (
            vec!["family", "workload", "pearson r", "time r", "plans", "proxy min", "proxy max", "ms min", "ms max"],
            10,
        ),
        "fit" => (vec!["machine", "strategy", "inputs split", "resident GB", "peak GB", "predicted ms"], 3 * 6),
        "budget" => (vec!["budget GB", "inputs split", "resident GB", "peak GB", "predicted ms"], 11),
        // Two machines with --small, seven workloads.
        "scale" => (
            vec![
                "machine",
                "workload",
                "dp",
                "data",
                "megatron",
                "ulysses",
                "mesh2d",
                "dp / best baseline",
                "dp model error %",
            ],
            2 * 7,
        ),
        // One machine with --small, two models at three batches.
        "decode" => (
            vec![
                "machine",
                "model",
                "dp",
                "data",
                "megatron",
                "ulysses",
                "mesh2d",
                "dp / megatron",
                "dp / best baseline",
            ],
            6,
        ),
        other => panic!("no expectation for {other}"),
    }
}

#[test]
fn every_experiment_writes_its_three_files_from_the_command_line() {
    let out = temp_dir("all");
    let run = Command::new(env!("CARGO_BIN_EXE_einsummable"))
        .args(["experiment", "all", "--small", "--devices", "1,2", "--json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let tables = json["experiments"].as_array().unwrap();
    assert_eq!(tables.len(), Experiment::ALL.len());
    for (e, table) in Experiment::ALL.iter().zip(tables) {
        let name = e.name();
        assert_eq!(table["name"], name);
        let (columns, rows) = expected(name);
        let (header, body) = read_csv(&out.join(format!("{name}.csv")));
        assert_eq!(header, columns, "{name}");
        assert_eq!(body.len(), rows, "{name}");
        assert_eq!(table["rows"].as_array().unwrap().len(), rows, "{name}");
        for row in &body {
            assert_eq!(row.len(), columns.len(), "{name}: {row:?}");
        }
        let md = std::fs::read_to_string(out.join(format!("{name}.md"))).unwrap();
        assert!(md.starts_with(&format!("## {name}\n")), "{md}");
        // The header, the separator and one line per row.
        assert_eq!(md.lines().filter(|l| l.starts_with("| ")).count(), rows + 2, "{md}");
        // Every n/a cell has its reason listed under the table.
        if body.iter().flatten().any(|c| c == "n/a") {
            assert!(md.contains("\nn/a:\n- "), "{md}");
        }
        let svg = std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("<rect"), "{name}");
    }

    // Values: dp compiles everywhere, so its cells are numbers; at p = 1 nothing moves, so
    // every strategy that planned predicts the same time.
    let (_, transformer) = read_csv(&out.join("transformer.csv"));
    for row in &transformer {
        let dp: f64 = row[2].parse().unwrap_or_else(|_| panic!("dp cell {row:?}"));
        assert!(dp > 0.0, "{row:?}");
        let joint: f64 = row[7].parse().unwrap_or_else(|_| panic!("dp+rewrites cell {row:?}"));
        assert!(joint > 0.0, "{row:?}");
    }
    let (_, proxy) = read_csv(&out.join("proxy.csv"));
    for row in &proxy {
        for cell in &row[2..4] {
            if let Ok(r) = cell.parse::<f64>() {
                assert!((-1.0..=1.0).contains(&r), "{row:?}");
            }
        }
        assert_eq!(row[4], "20", "{row:?}");
    }
    // Memory: every plan that fits is within its budget (the machine's default divided by
    // 20 with --small: 1.8 GB on A100-40GB, 3.6 GB on H100-80GB); `data` holds every weight
    // on every device and is refused; the smallest budgets fit nothing.
    let (_, fit) = read_csv(&out.join("fit.csv"));
    for row in &fit {
        let budget = if row[0].contains("A100") { 1.8 } else { 3.6 };
        match row[1].as_str() {
            "data" => assert_eq!(row[4], "n/a", "{row:?}"),
            "dp" => assert!(row[4].parse::<f64>().is_ok_and(|peak| peak <= budget), "{row:?}"),
            _ => assert!(row[4] == "n/a" || row[4].parse::<f64>().is_ok_and(|peak| peak <= budget), "{row:?}"),
        }
    }
    let (_, budget) = read_csv(&out.join("budget.csv"));
    for row in &budget {
        let gb: f64 = row[0].parse().unwrap();
        assert!(row[3] == "n/a" || row[3].parse::<f64>().is_ok_and(|peak| peak <= gb), "{row:?}");
    }
    assert!(budget[0][3] != "n/a" && budget.last().unwrap()[3] == "n/a", "{budget:?}");
    let (_, exchange) = read_csv(&out.join("exchange.csv"));
    assert!(exchange.iter().any(|r| r[0] == "dgx-v100") && exchange.iter().any(|r| r[0] == "dgx-a100"));
    // Scale: the default plans every cell; its ratio to the best baseline is its time over the
    // smallest baseline time of the row; the fidelity note counts every plan.
    let (_, scale) = read_csv(&out.join("scale.csv"));
    for row in &scale {
        let dp: f64 = row[2].parse().unwrap_or_else(|_| panic!("dp cell {row:?}"));
        let best = row[3..7].iter().filter_map(|c| c.parse::<f64>().ok()).fold(f64::INFINITY, f64::min);
        let ratio: f64 = row[7].parse().unwrap_or_else(|_| panic!("ratio cell {row:?}"));
        assert!((ratio - dp / best).abs() <= 1e-9 * ratio, "{row:?}");
    }
    let md = std::fs::read_to_string(out.join("scale.md")).unwrap();
    assert!(md.contains("The time model over all ") && md.contains("Pearson r"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn one_experiment_runs_alone_through_the_library() {
    let out = temp_dir("chains");
    let setup = Setup::named("dgx-a100", vec![2], out.clone(), true).unwrap();
    let mut runner = Runner::quiet();
    let outcome = Experiment::Chains.run(&setup, &mut runner).unwrap();
    assert_eq!(outcome.table.rows.len(), 5);
    assert_eq!(outcome.files.len(), 3);
    assert!(outcome.files.iter().all(|f| f.is_file()));
    assert_eq!(outcome.chart.groups.len(), 5);
    let _ = std::fs::remove_dir_all(&out);
}

/// A strategy that has a plan for nothing.
struct NoPlan;

impl LogicalOptimizer for NoPlan {
    fn name(&self) -> &str {
        "no-such-strategy"
    }

    fn solve(&self, _: &Problem) -> einsum_logical::Result<Vec<usize>> {
        Err(einsum_logical::Error::InvalidPlan("no-such-strategy has no plan".into()))
    }
}

#[test]
fn a_strategy_without_a_plan_is_a_missing_cell_with_its_reason() {
    let mut runner = Runner::quiet();
    let target = CostModels::time().named("dgx-a100").unwrap();
    let case = |s: &Strategy| Case::new("chain-c:scale=64", 2, s, Arc::new(NaiveSynthesizer), &target);
    let (dp, none) = (Strategy::dp(), Strategy::new(Arc::new(NoPlan)));
    runner.run_all("test", &[case(&dp), case(&none)]);
    let dp = Cell::of(&runner.get(&case(&dp)), |m| m.predicted_ms);
    let missing = Cell::of(&runner.get(&case(&none)), |m| m.predicted_ms);
    assert!(dp.value().is_some_and(|v| v > 0.0), "{dp:?}");
    let Cell::Missing(reason) = &missing else { panic!("{missing:?}") };
    assert!(reason.contains("no-such-strategy"), "{reason}");

    let mut table = Table::new("t", "caption".into(), &["workload", "dp", "no-such-strategy"]);
    table.rows.push(vec![Cell::Text("chain C".into()), dp, missing]);
    assert!(table.to_csv().ends_with(",n/a\n"), "{}", table.to_csv());
    let md = table.to_markdown();
    assert!(md.contains("| n/a |") && md.contains("- no-such-strategy (chain C): "), "{md}");
}

#[test]
fn bad_arguments_are_typed_errors() {
    assert!(Experiment::by_name("figure9").unwrap_err().to_string().contains("transformer, chains"));
    assert_eq!(Experiment::by_name("all").unwrap().len(), 9);
    let setup = Setup::named("dgx-a100", vec![16], temp_dir("bad"), true).unwrap();
    let err = Experiment::Transformer.run(&setup, &mut Runner::quiet()).unwrap_err().to_string();
    assert!(err.contains("16") && err.contains("8 sites"), "{err}");
    assert!(Setup::named("dgx-b300", vec![2], temp_dir("bad"), true).is_err());
}

#[test]
fn bad_device_lists_fail_on_the_command_line_with_one_json_error() {
    // 16 devices do not fit the one-node machine named; without --topology it would scale.
    for devices in ["1,x", "0", "1,16"] {
        let run = Command::new(env!("CARGO_BIN_EXE_einsummable"))
            .args([
                "experiment",
                "chains",
                "--small",
                "--json",
                "--topology",
                "dgx-a100",
                "--devices",
                devices,
                "--out",
            ])
            .arg(temp_dir("bad-cli"))
            .output()
            .unwrap();
        assert!(!run.status.success(), "{devices}");
        let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        assert!(json["error"].as_str().is_some_and(|e| e.contains("device")), "{devices}: {json}");
    }
}

/// Without `--topology`, a device list past one node plans on the default machine scaled to
/// enough nodes, and the caption names it.
#[test]
fn device_lists_past_one_node_scale_the_default_machine() {
    let run = Command::new(env!("CARGO_BIN_EXE_einsummable"))
        .args(["experiment", "chains", "--small", "--json", "--devices", "1,16", "--out"])
        .arg(temp_dir("scaled"))
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let caption = json["experiments"][0]["caption"].as_str().unwrap();
    assert!(caption.contains("for dgx-a100x2."), "{caption}");
}

#[test]
fn helpers_match_hand_computed_values() {
    assert_eq!(experiment::geometric_mean(&[2.0, 8.0]), Some(4.0));
    assert_eq!(experiment::geometric_mean(&[]), None);
    let r = experiment::pearson(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
    assert!((r - 0.8).abs() < 1e-12, "{r}");
}
