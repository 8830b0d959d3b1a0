//! The committed corpus of hostile and odd inputs (`tests/hostile/`): command lines, topology
//! files, ExProg files and output paths. Every case must end cleanly: exit 0 with one JSON
//! report, or exit 1 or 2 with one JSON error object on stdout and the message on stderr;
//! never a panic, an abort, a death by signal, a hang, or a damaged file.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The corpus directory.
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hostile");

/// Longer than any case needs on a loaded two-core machine; only a hang reaches it.
const HANG: Duration = Duration::from_secs(300);

/// What a case must end with.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Ok,
    Error,
}

/// A fresh scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("einsummable-hostile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the binary with `args` and `--json` under an 8 GiB address-space limit (so that a
/// runaway allocation is the binary's own error or abort, never the machine's), and checks
/// that it ends as `expect` says: the description of what went wrong, if anything did.
fn run_case(args: &[String], expect: Expect) -> Option<String> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_einsummable"));
    command.args(args).arg("--json").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    limit_address_space(&mut command, 8 << 30);
    let mut child = command.spawn().expect("the binary starts");
    // Drain both pipes on threads, so a chatty child never blocks on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        stdout.read_to_end(&mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        stderr.read_to_end(&mut s).map(|_| s)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            return Some(format!("still running after {HANG:?}: a hang"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&out.join().unwrap().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&err.join().unwrap().unwrap()).into_owned();
    let Some(code) = status.code() else {
        return Some(format!("ended by a signal ({status}); stderr: {stderr}"));
    };
    if stderr.contains("panicked") || code == 101 {
        return Some(format!("panicked: {stderr}"));
    }
    let report: serde_json::Value = match serde_json::from_str(stdout.trim()) {
        Ok(v) => v,
        Err(e) => return Some(format!("exit {code}, stdout is not one JSON object ({e}): {stdout:.300}")),
    };
    match (expect, code) {
        (Expect::Ok, 0) => None,
        (Expect::Error, 1 | 2) if report["error"].is_string() && !stderr.trim().is_empty() => None,
        // `exprog simulate` reports an invalid program as its result, with exit 1.
        (Expect::Error, 1) if report["valid"] == false && report["invalid"].is_string() => None,
        _ => Some(format!("exit {code}, expected {expect:?}; stdout {stdout:.300}; stderr {stderr:.300}")),
    }
}

/// Caps the child's address space (`RLIMIT_AS`) before it runs.
fn limit_address_space(command: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: `setrlimit` is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
        });
    }
}

/// Runs `cases` on two threads and fails listing every case that did not end as expected.
fn run_all(cases: Vec<(String, Vec<String>, Expect)>) {
    let cases = std::sync::Mutex::new(cases.into_iter());
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let Some((name, args, expect)) = cases.lock().unwrap().next() else { break };
                    if let Some(what) = run_case(&args, expect) {
                        failures.lock().unwrap().push(format!("{name}: {what}"));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} case(s) did not end cleanly:\n{}", failures.len(), failures.join("\n"));
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Every line of `cli.txt`.
#[test]
fn command_lines() {
    let scratch = Scratch::new("cli");
    let tmp = scratch.0.to_str().unwrap();
    let text = std::fs::read_to_string(Path::new(CORPUS).join("cli.txt")).unwrap();
    let mut cases = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (expect, args) = line.split_once('|').unwrap_or_else(|| panic!("cli.txt:{}: no `|`", n + 1));
        let expect = match expect.trim() {
            "ok" => Expect::Ok,
            "error" => Expect::Error,
            other => panic!("cli.txt:{}: unknown expectation `{other}`", n + 1),
        };
        let args = args.split_whitespace().map(|a| a.replace("$CORPUS", CORPUS).replace("$TMP", tmp)).collect();
        cases.push((format!("cli.txt:{}: {}", n + 1, line), args, expect));
    }
    assert!(cases.len() > 100, "the corpus holds {} command lines", cases.len());
    run_all(cases);
}

/// Each file of `topologies/` given to `plan`: an error unless its name starts with `ok-`.
/// So are generated ones too large to commit: 200 000 links.
#[test]
fn topology_files() {
    let scratch = Scratch::new("topologies");
    let many = scratch.0.join("many-links.json");
    let links = vec![r#"{"a": 0, "b": 1, "gbps": 1}"#; 200_000].join(", ");
    std::fs::write(
        &many,
        format!(
            r#"{{"name": "z", "sites": 2, "site": {{"hbm_gbps": 900, "hbm_gb": 80, "tflops": {{"f16": 1, "bf16": 1, "f32": 1}}}}, "links": [{links}], "fallback": {{"shared": "bus", "gbps": 10}}}}"#
        ),
    )
    .unwrap();
    let mut files = corpus_files("topologies");
    files.push(many);
    let cases = files
        .into_iter()
        .map(|file| {
            let expect = expectation(&file);
            let args = strings(&["plan", "matmul:n=64", "--devices", "2", "--topology", file.to_str().unwrap()]);
            (file.display().to_string(), args, expect)
        })
        .collect();
    run_all(cases);
}

/// Each file of `exprog/` through `exprog check`, `simulate` and `synthesize`: an error
/// unless its name starts with `ok-`, except that `synthesize`, which reads only IN and OUT,
/// succeeds on `bad-actions-` files. So is a generated broadcast of 10 000 atoms, which
/// `synthesize` must plan within its memory and budget (the naive program, not an abort).
#[test]
fn exprog_files() {
    let scratch = Scratch::new("exprog");
    let broadcast = scratch.0.join("ok-broadcast-10000-atoms.exprog");
    let atoms: Vec<String> = (0..10_000).map(|i| format!("A{i} @ 0")).collect();
    let outs: Vec<String> = (0..10_000).map(|i| format!("A{i} @ 0, 1, 2, 3, 4, 5, 6, 7")).collect();
    std::fs::write(&broadcast, format!("IN: {}\nOUT: {}\n", atoms.join("; "), outs.join("; "))).unwrap();
    let mut cases = Vec::new();
    for file in corpus_files("exprog") {
        let expect = expectation(&file);
        let path = file.to_str().unwrap();
        for args in [
            &["exprog", "check", path][..],
            &["exprog", "simulate", path, "--topology", "dgx-h100"],
            &["exprog", "synthesize", path, "--topology", "dgx-h100", "--synthesizer", "naive"],
        ] {
            let bad_actions = file.file_name().unwrap().to_str().unwrap().starts_with("bad-actions-");
            let expect = if args[1] == "synthesize" && bad_actions { Expect::Ok } else { expect };
            cases.push((format!("{} ({})", file.display(), args[1]), strings(args), expect));
        }
    }
    let path = broadcast.to_str().unwrap();
    let args =
        ["exprog", "synthesize", path, "--topology", "dgx-h100", "--synthesizer", "search", "--synthesis-budget", "5"];
    cases.push((broadcast.display().to_string(), strings(&args), Expect::Ok));
    run_all(cases);
}

/// The files of the corpus directory `dir`, sorted.
fn corpus_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(Path::new(CORPUS).join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 20, "the {dir} corpus holds {} files", files.len());
    files
}

fn expectation(file: &Path) -> Expect {
    if file.file_name().unwrap().to_str().unwrap().starts_with("ok-") { Expect::Ok } else { Expect::Error }
}

/// Output paths that name something other than a plain new file: each command either
/// writes where the path leads, keeping what it is (a link stays a link, a device a device,
/// a FIFO a FIFO), or refuses cleanly, and never damages what is there.
#[test]
fn output_paths() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt, symlink};
    let scratch = Scratch::new("outputs");
    let dir = &scratch.0;
    let precious = dir.join("precious.txt");
    std::fs::write(&precious, "keep me").unwrap();
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o600)).unwrap();
    symlink(&precious, dir.join("link-to-precious")).unwrap();
    symlink(dir.join("absent"), dir.join("dangling")).unwrap();
    std::fs::create_dir(dir.join("a-dir")).unwrap();
    let fifo = dir.join("a-fifo");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let cases = vec![
        // A file behind a link: written through the link, the link kept, the mode kept.
        (strings(&["explain", "matmul:n=8", "--devices", "2", "--dot", &path("link-to-precious")]), Expect::Ok),
        (strings(&["explain", "matmul:n=8", "--devices", "2", "--dot", &path("dangling")]), Expect::Error),
        (strings(&["explain", "matmul:n=8", "--devices", "2", "--dot", &path("a-dir")]), Expect::Error),
        (strings(&["explain", "matmul:n=8", "--devices", "2", "--dot", &path("a-fifo")]), Expect::Error),
        (strings(&["explain", "matmul:n=8", "--devices", "2", "--dot", "/dev/null"]), Expect::Ok),
        (strings(&["explain", "matmul:n=8", "--devices", "2", "--dot", &path("precious.txt/x")]), Expect::Error),
        (strings(&["run", "matmul:n=8", "--devices", "2", "--dump", &path("precious.txt")]), Expect::Error),
        (strings(&["run", "matmul:n=8", "--devices", "2", "--dump", &path("a-fifo")]), Expect::Error),
        (strings(&["experiment", "proxy", "--small", "--out", &path("precious.txt")]), Expect::Error),
        // `--trace` goes through the same writer on every command.
        (strings(&["plan", "matmul:n=8", "--devices", "2", "--trace", &path("a-fifo")]), Expect::Error),
        (strings(&["plan", "matmul:n=8", "--devices", "2", "--trace", "/dev/null"]), Expect::Ok),
        (strings(&["explain", "matmul:n=8", "--devices", "2", "--trace", &path("dangling")]), Expect::Error),
        (strings(&["run", "matmul:n=8", "--devices", "2", "--trace", &path("a-dir")]), Expect::Error),
    ];
    for (args, expect) in cases {
        if let Some(what) = run_case(&args, expect) {
            panic!("{args:?}: {what}");
        }
    }
    let meta = std::fs::symlink_metadata(dir.join("link-to-precious")).unwrap();
    assert!(meta.file_type().is_symlink(), "the link is still a link");
    assert!(std::fs::read_to_string(&precious).unwrap().starts_with("digraph"), "written through the link");
    assert_eq!(std::fs::metadata(&precious).unwrap().permissions().mode() & 0o777, 0o600, "the mode is kept");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is still a FIFO");
    assert!(std::fs::symlink_metadata(dir.join("dangling")).unwrap().file_type().is_symlink());
    assert!(!dir.join("absent").exists(), "a dangling link's target is not created");
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}
