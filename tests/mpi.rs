//! `run --backend mpi` under `mpirun` (the `mpi` feature, with Open MPI installed): the
//! checked default run over 4 ranks; a two-node plan over 2 and 4 ranks whose outputs are
//! bit-equal to the single-process CPU backend's; layouts refused before anything runs; a
//! killed rank and a stalled one end the job with a non-zero exit naming the rank.
#![cfg(feature = "mpi")]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_einsummable");

/// A small LLaMA block whose 16-device plan for two DGX nodes exchanges blocks between nodes.
const SMALL: &str = "llama-block:tokens=64,seqs=2,d_model=64,heads_q=8,heads_kv=4,d_head=8,d_ff=128";

/// `mpirun -np ranks --oversubscribe einsummable args...`, as root where CI runs as root;
/// `mark` is put in every rank's environment (to find the ranks' processes).
fn mpirun(ranks: usize, args: &[&str], mark: &str) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["-np", &ranks.to_string(), "--oversubscribe", "-x", &format!("EINSUM_MPI_TEST_MARK={mark}"), BIN])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("EINSUM_MPI_TEST_MARK", mark);
    c
}

/// Waits for `child` at most `limit`, killing it after; its output and how long it took.
fn wait(mut child: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    while child.try_wait().expect("waitable").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("killed");
            panic!(
                "mpirun still running after {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (child.wait_with_output().expect("exited"), start.elapsed())
}

/// Runs `command` to the end (at most 5 minutes).
fn output(mut command: Command) -> Output {
    let child =
        command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect(
            "mpirun runs: the `mpi` feature's tests need Open MPI (apt-get install libopenmpi-dev openmpi-bin)",
        );
    wait(child, Duration::from_secs(300)).0
}

fn text(out: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A new empty directory under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The command: the default LLaMA block on 8 devices over 4 ranks, checked against
/// the single-device reference on rank 0, which alone prints (one JSON object).
#[test]
fn the_default_run_passes_its_check_over_four_ranks() {
    let out = output(mpirun(4, &["run", "--backend", "mpi", "--devices", "8", "--check", "--json"], "check"));
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["max_rel_error"].as_f64().expect("checked") <= v["tolerance"].as_f64().expect("a tolerance"));
}

/// The `.npy` files of a dump, by name.
fn dumped(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("a dump")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "npy"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).expect("readable")))
        .collect();
    files.sort();
    files
}

/// A 16-device plan for two DGX nodes, over 2 ranks (one per node) and 4: every input and
/// output rank 0 dumps is byte-equal to the single-process CPU backend's.
#[test]
fn two_nodes_over_two_and_four_ranks_equal_one_process_bit_for_bit() {
    let plan = ["run", SMALL, "--devices", "16", "--topology", "dgx-a100x2", "--seed", "3", "--dump"];
    let single = scratch("mpi-single");
    let mut cpu = Command::new(BIN);
    cpu.args(plan).arg(&single).args(["--backend", "cpu"]);
    let out = output(cpu);
    assert!(out.status.success(), "{}", text(&out));
    let want = dumped(&single);
    assert!(want.iter().any(|(n, _)| n.starts_with("out")) || want.len() > 1, "{want:?}");
    for ranks in [2, 4] {
        let dir = scratch(&format!("mpi-{ranks}"));
        let dir_arg = dir.to_string_lossy().into_owned();
        let mut args: Vec<&str> = plan.to_vec();
        args.extend([dir_arg.as_str(), "--backend", "mpi"]);
        let out = output(mpirun(ranks, &args, "nodes"));
        assert!(out.status.success(), "{ranks} ranks: {}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("over {ranks} ranks")), "{}", text(&out));
        let got = dumped(&dir);
        assert_eq!(got.len(), want.len(), "{ranks} ranks");
        for ((name, a), (_, b)) in got.iter().zip(&want) {
            assert!(a == b, "{ranks} ranks: {name} differs from the single-process run's");
        }
    }
}

/// A Hugging Face checkpoint over 2 ranks: rank 1 reads only its devices' parts of each
/// weight from the file; the logits rank 0 dumps equal the single-process run's bit for bit,
/// and the check against the single-device reference passes.
#[test]
fn a_checkpoint_over_two_ranks_equals_one_process_bit_for_bit() {
    let model = concat!("hf:", env!("CARGO_MANIFEST_DIR"), "/einsum-models/tests/fixtures/llama3");
    let plan = ["run", model, "--devices", "4", "--check", "--dump"];
    let single = scratch("mpi-model-single");
    let mut cpu = Command::new(BIN);
    cpu.args(plan).arg(&single).args(["--backend", "cpu"]);
    let out = output(cpu);
    assert!(out.status.success(), "{}", text(&out));
    let dir = scratch("mpi-model");
    let dir_arg = dir.to_string_lossy().into_owned();
    let mut args: Vec<&str> = plan.to_vec();
    args.extend([dir_arg.as_str(), "--backend", "mpi"]);
    let out = output(mpirun(2, &args, "model"));
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("(PASS)"), "{}", text(&out));
    let (got, want) = (dumped(&dir), dumped(&single));
    assert!(!want.is_empty());
    assert!(got == want, "the dumped logits differ from the single-process run's");
}

/// Ranks that do not divide the devices, and one rank over two nodes, are refused on every
/// rank before anything is compiled.
#[test]
fn layouts_that_do_not_fit_are_refused() {
    let out = output(mpirun(3, &["run", SMALL, "--backend", "mpi", "--devices", "8"], "uneven"));
    assert!(!out.status.success());
    assert!(text(&out).contains("3 ranks do not divide 8 devices"), "{}", text(&out));
    let out =
        output(mpirun(1, &["run", SMALL, "--backend", "mpi", "--devices", "16", "--topology", "dgx-a100x2"], "spans"));
    assert!(!out.status.success());
    assert!(text(&out).contains("rank 0 would own devices 0..16"), "{}", text(&out));
}

/// `--backend mpi-cuda` on a machine without a GPU fails before any rank waits for another,
/// with a non-zero exit saying what is missing; built without the `nccl` feature, it says
/// how to get it. (Skipped where a GPU is present.)
#[test]
fn the_gpu_job_without_a_gpu_fails_naming_what_is_missing() {
    if einsum_cuda::availability::check_cuda().is_ok() {
        return;
    }
    let out = output(mpirun(2, &["run", SMALL, "--backend", "mpi-cuda", "--devices", "8"], "nogpu"));
    assert!(!out.status.success(), "{}", text(&out));
    let said = text(&out);
    let expected = if cfg!(feature = "nccl") { "no CUDA driver" } else { "--features nccl" };
    assert!(said.contains(expected), "{said}");
}

/// The process ids of the ranks of the job marked `mark`, by rank (from their environments).
fn rank_pids(mark: &str) -> Vec<(usize, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("procfs").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else { continue };
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        let has = |kv: &str| vars.contains(&kv.as_bytes());
        let rank = vars.iter().find_map(|v| v.strip_prefix(b"OMPI_COMM_WORLD_RANK=".as_slice()));
        if has(&format!("EINSUM_MPI_TEST_MARK={mark}"))
            && let Some(rank) = rank.and_then(|r| std::str::from_utf8(r).ok()?.parse().ok())
        {
            found.push((rank, pid));
        }
    }
    found.sort();
    found
}

/// Starts a long run of the default block over 2 ranks and waits until both ranks run.
#[allow(clippy::zombie_processes, reason = "the running child is returned, and its caller waits for it")]
fn long_run(mark: &str, extra: &[&str]) -> (Child, u32) {
    let mut args = vec!["run", "--backend", "mpi", "--devices", "8", "--repeat", "10000"];
    args.extend(extra);
    let mut child = mpirun(2, &args, mark).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("mpirun runs");
    let start = Instant::now();
    loop {
        let pids = rank_pids(mark);
        if pids.len() == 2 {
            // Past joining the job and compiling, well into the runs.
            std::thread::sleep(Duration::from_secs(8));
            return (child, pids[1].1);
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().expect("killed");
            panic!("the ranks never started: {}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Rank 1 killed mid-run: the job ends with a non-zero exit, and its output names rank 1.
#[test]
fn a_killed_rank_ends_the_job_naming_it() {
    let (child, pid) = long_run("killed", &[]);
    let killed = Instant::now();
    // SAFETY: signalling a process this test started (through mpirun).
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let (out, _) = wait(child, Duration::from_secs(120));
    let took = killed.elapsed();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("rank 1"), "{}", text(&out));
    println!("the job ended {:.2} s after rank 1 was killed", took.as_secs_f64());
    println!("{}", text(&out).lines().find(|l| l.contains("rank 1")).unwrap_or_default());
}

/// Rank 1 stopped mid-run (alive, but silent): rank 0 gives up after its rank timeout,
/// naming rank 1 and the task it waited in, and ends the job.
#[test]
fn a_stalled_rank_is_named_by_the_rank_that_waits_for_it() {
    let (child, pid) = long_run("stalled", &["--rank-timeout", "3"]);
    let stopped = Instant::now();
    // SAFETY: signalling a process this test started (through mpirun).
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    let (out, _) = wait(child, Duration::from_secs(120));
    let took = stopped.elapsed();
    // SAFETY: as above; the process may be gone already.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert!(!out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("error: rank 0 of 2") && all.contains("rank 1"), "{all}");
    println!("the job ended {:.2} s after rank 1 stopped (rank timeout 3 s)", took.as_secs_f64());
    println!("{}", all.lines().find(|l| l.starts_with("error: rank 0")).unwrap_or_default());
}
