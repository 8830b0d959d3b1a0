//! SIGINT and SIGTERM between a temporary file's creation and its rename leave nothing
//! behind once [`remove_temporaries_on_signals`] is set up, and end the process by the
//! signal. The test runs itself as a child process (signals must be blocked before any other
//! thread starts, so it has its own `main`, not the test harness).

use std::io::Write;
use std::path::Path;
use std::process::Command;

use einsum_core::temporary::{TemporaryFile, remove_temporaries_on_signals};

/// The environment variable that makes this binary the child, writing into its directory.
const CHILD: &str = "EINSUM_CORE_INTERRUPT_CHILD";

fn main() {
    if let Some(dir) = std::env::var_os(CHILD) {
        child(Path::new(&dir));
    }
    #[cfg(unix)]
    for signal in [libc::SIGINT, libc::SIGTERM] {
        use std::os::unix::process::ExitStatusExt;
        let dir = std::env::temp_dir().join(format!("einsum-core-interrupt-{}-{signal}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, &dir)
            .env("EINSUM_CORE_SIGNAL", signal.to_string())
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(signal), "the child ends by signal {signal}: {status}");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "signal {signal} left {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    println!("test result: ok. 1 passed; 0 failed");
}

/// Creates a temporary file in `dir`, signals its own process, and waits to be ended.
fn child(dir: &Path) -> ! {
    remove_temporaries_on_signals().unwrap();
    let (temp, mut file) = TemporaryFile::beside(&dir.join("out.txt")).unwrap();
    file.write_all(b"half of an output").unwrap();
    assert!(temp.path().exists());
    #[cfg(unix)]
    {
        let signal: i32 = std::env::var("EINSUM_CORE_SIGNAL").unwrap().parse().unwrap();
        // SAFETY: signalling this process; the signal thread handles it.
        unsafe { libc::kill(libc::getpid(), signal) };
    }
    std::thread::sleep(std::time::Duration::from_secs(120));
    // Not ended by the signal: the parent sees a normal exit and fails.
    std::process::exit(0)
}
