//! Reading user files with a size cap, and writing output files atomically.
//!
//! Every file the workspace reads from a user (ExProg programs, topology files) goes through
//! [`read_capped`], so that `/dev/zero`, a FIFO that never ends or a mistyped multi-gigabyte
//! path fails with a typed error after at most [`MAX_INPUT_FILE_BYTES`] bytes instead of
//! exhausting memory. Every file the workspace writes (`--dump`, `--dot`, `experiment
//! --out`) goes through [`write_atomic`], so that a failure part-way (a full disk, a
//! killed process) leaves either the previous file or the new one, never a truncated one.
//!
//! Both live here, in the crate with no workspace dependencies, so that the driver and every
//! library crate (`einsum-sim` reads topology files) can share one implementation.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The default cap on an input file, in bytes (64 MiB): far above any hand-written or
/// generated program or topology (the largest checked-in example is a few KB; a synthesized
/// program for 1024 devices is a few MB), far below the memory of any machine that runs the
/// pipeline.
pub const MAX_INPUT_FILE_BYTES: u64 = 64 << 20;

/// A file that could not be read or written, naming it.
#[derive(Debug)]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub kind: FileErrorKind,
}

/// What went wrong with a [`FileError`]'s file.
#[derive(Debug)]
pub enum FileErrorKind {
    /// The operating system refused (no such file, permission denied, disk full, ...).
    Io(io::Error),
    /// The path names a directory, where a file was expected.
    Directory,
    /// The file holds more than the cap allows (a regular file by its size, before reading;
    /// a device or pipe once that many bytes have been read).
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
    },
    /// The file is not UTF-8 text.
    NotUtf8 {
        /// The offset of the first byte that is not part of valid UTF-8.
        offset: usize,
    },
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.kind)
    }
}

impl fmt::Display for FileErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileErrorKind::Io(e) => write!(f, "{e}"),
            FileErrorKind::Directory => f.write_str("is a directory, not a file"),
            FileErrorKind::TooLarge { limit } => {
                write!(f, "larger than the limit of {limit} bytes ({} MiB) for an input file", limit >> 20)
            }
            FileErrorKind::NotUtf8 { offset } => write!(f, "not UTF-8 text (invalid byte at offset {offset})"),
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            FileErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl FileError {
    fn new(path: &Path, kind: FileErrorKind) -> Self {
        FileError { path: path.to_path_buf(), kind }
    }

    fn io(path: &Path, e: io::Error) -> Self {
        FileError::new(path, FileErrorKind::Io(e))
    }

    /// The message without the path (for error types that hold the path separately).
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

/// Reads the UTF-8 text file at `path`, refusing it once it holds more than `limit` bytes.
///
/// A regular file larger than `limit` is refused from its size without reading it; any
/// other readable file (a device such as `/dev/zero`, a pipe, `/dev/stdin`) is read until
/// `limit + 1` bytes have arrived, so at most `limit + 1` bytes are ever held. A directory
/// is refused by name rather than with the operating system's "Is a directory".
pub fn read_capped(path: impl AsRef<Path>, limit: u64) -> Result<String, FileError> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|e| FileError::io(path, e))?;
    let meta = file.metadata().map_err(|e| FileError::io(path, e))?;
    if meta.is_dir() {
        return Err(FileError::new(path, FileErrorKind::Directory));
    }
    if meta.is_file() && meta.len() > limit {
        return Err(FileError::new(path, FileErrorKind::TooLarge { limit }));
    }
    // A regular file's size is a good first guess; a device or pipe reports 0.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(limit)).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| FileError::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(FileError::new(path, FileErrorKind::TooLarge { limit }));
    }
    String::from_utf8(bytes)
        .map_err(|e| FileError::new(path, FileErrorKind::NotUtf8 { offset: e.utf8_error().valid_up_to() }))
}

/// Writes `bytes` to `path` atomically: into a new temporary file in the same directory,
/// which is then renamed over `path`. On any error the temporary file is removed and `path`
/// is untouched (it keeps its previous contents, or stays absent), so no reader ever sees
/// a truncated file. (Atomic against failures of this process; the data is not `fsync`ed,
/// so a power loss right after may still lose the new contents.)
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<(), FileError> {
    let path = path.as_ref();
    let temp = temporary_beside(path);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.flush()))
        .and_then(|()| fs::rename(&temp, path));
    written.map_err(|e| {
        // Best effort: the temporary may not exist (create failed) or may be gone already.
        let _ = fs::remove_file(&temp);
        FileError::io(path, e)
    })
}

/// A name in `path`'s directory that no other writer uses: the file name, hidden, with this
/// process's id and a per-process counter (`.NAME.PID.N.tmp`).
fn temporary_beside(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or(path.as_os_str()));
    name.push(format!(".{}.{n}.tmp", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("einsum-core-fsio-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn reads_within_the_cap_and_refuses_past_it() {
        let dir = scratch("read");
        let file = dir.join("a.txt");
        fs::write(&file, "12345").unwrap();
        assert_eq!(read_capped(&file, 5).unwrap(), "12345");
        let e = read_capped(&file, 4).unwrap_err();
        assert!(matches!(e.kind, FileErrorKind::TooLarge { limit: 4 }), "{e}");
        assert!(e.to_string().starts_with(&format!("{}: larger than the limit of 4 bytes", file.display())), "{e}");
        fs::write(&file, b"ok\xff").unwrap();
        assert!(matches!(read_capped(&file, 10).unwrap_err().kind, FileErrorKind::NotUtf8 { offset: 2 }));
        assert!(matches!(read_capped(&dir, 10).unwrap_err().kind, FileErrorKind::Directory));
        let missing = read_capped(dir.join("missing"), 10).unwrap_err();
        assert!(matches!(missing.kind, FileErrorKind::Io(_)) && missing.to_string().contains("missing"), "{missing}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn an_endless_device_stops_at_the_cap() {
        let e = read_capped("/dev/zero", 1 << 16).unwrap_err();
        assert!(matches!(e.kind, FileErrorKind::TooLarge { limit: 65536 }), "{e}");
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_nothing_on_failure() {
        let dir = scratch("write");
        let file = dir.join("out.csv");
        write_atomic(&file, b"first").unwrap();
        write_atomic(&file, b"second").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"second");
        // Renaming onto a directory fails: the temporary is removed and the directory stays.
        let blocked = dir.join("blocked");
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("keep"), b"").unwrap();
        assert!(write_atomic(&blocked, b"x").is_err());
        assert!(blocked.join("keep").exists());
        let mut left: Vec<String> =
            fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["blocked", "out.csv"]);
        let missing_dir = write_atomic(dir.join("no/such/dir.csv"), b"x").unwrap_err();
        assert!(missing_dir.to_string().contains("dir.csv"), "{missing_dir}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
