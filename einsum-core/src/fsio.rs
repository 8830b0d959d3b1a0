//! Reading user files with a size cap, and writing output files atomically.
//!
//! Every file the workspace reads from a user (ExProg programs, topology files) goes through
//! [`read_capped`], so that `/dev/zero`, a FIFO that never ends or a mistyped multi-gigabyte
//! path fails with a typed error after at most [`MAX_INPUT_FILE_BYTES`] bytes instead of
//! exhausting memory. Every file the workspace writes (`--dump`, `--dot`, `experiment
//! --out`) goes through [`write_atomic`], so that a failure part-way (a full disk, a
//! killed process) leaves either the previous file or the new one, never a truncated one,
//! and so that what the path names is respected: a symlink stays a link (its target is
//! written), a file keeps its mode and its hard links, a character device is written
//! through, and a FIFO, socket or block device is refused. [`write_set`] writes several
//! files (an experiment's table and chart) so that an error leaves none of them changed;
//! [`check_writable_dir`] probes a directory without following links.
//!
//! Both live here, in the crate with no workspace dependencies, so that the driver and every
//! library crate (`einsum-sim` reads topology files) can share one implementation.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::temporary::TemporaryFile;

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
    /// The path names something an output is not written to: a FIFO (writing would wait
    /// for a reader), a socket or a block device (a disk).
    NotWritable {
        /// What it is.
        what: &'static str,
    },
    /// The path names a FIFO that no process writes to (reading it would wait for ever), or
    /// whose writer closed it without writing anything.
    NoWriter,
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
            FileErrorKind::NotWritable { what } => {
                write!(f, "is a {what}, not written to: give a regular file or a character device")
            }
            FileErrorKind::NoWriter => f.write_str("is a FIFO with nothing written to it (no writer has it open)"),
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
/// is refused by name rather than with the operating system's "Is a directory". A FIFO is
/// opened without waiting for a writer (an ordinary open would wait for ever where none
/// comes): one with a writer is read to its end, one without is
/// [`FileErrorKind::NoWriter`].
pub fn read_capped(path: impl AsRef<Path>, limit: u64) -> Result<String, FileError> {
    let path = path.as_ref();
    let fifo = is_fifo(&fs::metadata(path).map_err(|e| FileError::io(path, e))?);
    let file = open_for_reading(path, fifo).map_err(|e| FileError::io(path, e))?;
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
    if fifo && bytes.is_empty() {
        return Err(FileError::new(path, FileErrorKind::NoWriter));
    }
    String::from_utf8(bytes)
        .map_err(|e| FileError::new(path, FileErrorKind::NotUtf8 { offset: e.utf8_error().valid_up_to() }))
}

/// Opens `path` for reading; a FIFO without waiting for a writer (`O_NONBLOCK`, cleared once
/// open so that reads wait for a writer's data, and end when it closes).
fn open_for_reading(path: &Path, fifo: bool) -> io::Result<File> {
    #[cfg(unix)]
    if fifo {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
        let fd = file.as_raw_fd();
        // SAFETY: `fd` is this open file's descriptor; F_GETFL/F_SETFL only read and set its
        // status flags.
        let cleared = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        return if cleared { Ok(file) } else { Err(io::Error::last_os_error()) };
    }
    let _ = fifo;
    File::open(path)
}

/// Whether `meta` is a FIFO's (never on platforms without them).
fn is_fifo(meta: &fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

/// Writes `bytes` to `path`, respecting what the path names:
/// - absent, or a regular file: atomically, into a new temporary file in the same directory
///   that is flushed to disk (`fsync`) and renamed over `path`, with the file's previous
///   mode. On any error the temporary file is removed and `path` is untouched (its previous
///   contents, or absent), so no reader ever sees a truncated file. A file with other hard
///   links is rewritten in place instead, so that every link keeps naming it (atomicity is
///   traded for their identity);
/// - a symbolic link: its target, by these same rules (the link stays a link);
/// - a character device (`/dev/null`, a terminal): written through as a stream;
/// - a FIFO, a socket or a block device: refused ([`FileErrorKind::NotWritable`]), as a
///   directory is ([`FileErrorKind::Directory`]).
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<(), FileError> {
    write_set(&[(path.as_ref(), bytes)])
}

/// Writes several files by the rules of [`write_atomic`], as a set as far as the file system
/// allows: every destination is checked and every new file written to its temporary and
/// flushed before any is renamed into place, so a refused path, a full disk or any error
/// while writing leaves none of the set changed (the temporaries removed); only the renames
/// (and the in-place writes to devices and hard-linked files) come after.
pub fn write_set(files: &[(&Path, &[u8])]) -> Result<(), FileError> {
    let destinations = files.iter().map(|&(path, _)| destination(path)).collect::<Result<Vec<_>, _>>()?;
    // Dropping the staged temporaries (on any return before their rename) removes them.
    let mut staged: Vec<(TemporaryFile, &Path)> = Vec::new();
    for (destination, &(_, bytes)) in destinations.iter().zip(files) {
        if let Destination::Replace { target, previous } = destination {
            staged.push((stage(target, bytes, previous.as_ref())?, target));
        }
    }
    for (temp, target) in staged {
        temp.persist(target).map_err(|e| FileError::io(target, e))?;
    }
    for (destination, &(_, bytes)) in destinations.iter().zip(files) {
        if let Destination::InPlace { target } = destination {
            rewrite(target, bytes)?;
        }
    }
    Ok(())
}

/// Where an output's bytes go.
enum Destination {
    /// A new file renamed over `target` (absent, or a regular file with its `previous`
    /// metadata).
    Replace { target: PathBuf, previous: Option<fs::Metadata> },
    /// Written in place: a hard-linked file or a character device.
    InPlace { target: PathBuf },
}

/// Where the bytes for `path` go, or why they do not (see [`write_atomic`]).
fn destination(path: &Path) -> Result<Destination, FileError> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Absent, or a link to something absent: the link is not replaced by a file.
            if fs::symlink_metadata(path).is_ok() {
                return Err(FileError::io(path, io::Error::new(io::ErrorKind::NotFound, "a link to a missing file")));
            }
            return Ok(Destination::Replace { target: path.to_path_buf(), previous: None });
        }
        Err(e) => return Err(FileError::io(path, e)),
    };
    if meta.is_dir() {
        return Err(FileError::new(path, FileErrorKind::Directory));
    }
    // The file the path resolves to: a link's target is written, the link kept.
    let target = if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        fs::canonicalize(path).map_err(|e| FileError::io(path, e))?
    } else {
        path.to_path_buf()
    };
    if meta.is_file() {
        return Ok(if links(&meta) > 1 {
            Destination::InPlace { target }
        } else {
            Destination::Replace { target, previous: Some(meta) }
        });
    }
    match special(&meta) {
        Some(what) => Err(FileError::new(path, FileErrorKind::NotWritable { what })),
        None => Ok(Destination::InPlace { target }),
    }
}

/// Writes a new temporary file beside `path` with `previous`'s permissions and flushes it to
/// disk (it is removed on any error, as on drop).
fn stage(path: &Path, bytes: &[u8], previous: Option<&fs::Metadata>) -> Result<TemporaryFile, FileError> {
    let (temp, mut file) = TemporaryFile::beside(path).map_err(|e| FileError::io(path, e))?;
    file.write_all(bytes)
        .and_then(|()| previous.map_or(Ok(()), |previous| file.set_permissions(previous.permissions())))
        .and_then(|()| file.sync_all())
        .map_err(|e| FileError::io(path, e))?;
    Ok(temp)
}

/// Writes `bytes` to the existing file or character device `path` in place.
fn rewrite(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.flush()))
        .map_err(|e| FileError::io(path, e))
}

/// The number of hard links to a regular file (1 where the platform does not say).
fn links(meta: &fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::nlink(meta)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        1
    }
}

/// What a file that is neither a regular file nor a directory is, when an output is not
/// written to it; `None` for a character device, which is written through.
fn special(meta: &fs::Metadata) -> Option<&'static str> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = meta.file_type();
        if kind.is_fifo() {
            Some("FIFO")
        } else if kind.is_socket() {
            Some("socket")
        } else if kind.is_block_device() {
            Some("block device")
        } else {
            None
        }
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Checks that files can be created in the directory `dir` by creating and removing a probe
/// file whose name no other process or call uses, created exclusively (`create_new`), so
/// that a link planted under that name is never followed.
pub fn check_writable_dir(dir: impl AsRef<Path>) -> Result<(), FileError> {
    let dir = dir.as_ref();
    // Dropping the probe removes it.
    TemporaryFile::beside(&dir.join("write-probe")).map(drop).map_err(|e| FileError::io(dir, e))
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

    /// A FIFO that nobody writes is refused at once (an ordinary open would wait for ever);
    /// a pipe that holds data, as a shell's `<(...)` gives one, is read to its end.
    #[cfg(target_os = "linux")]
    #[test]
    fn fifos_without_a_writer_are_refused_and_pipes_read() {
        use std::os::unix::ffi::OsStrExt;
        let dir = scratch("fifo-read");
        let fifo = dir.join("in.fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = fifo.clone();
        std::thread::spawn(move || tx.send(read_capped(&reader, 1 << 10).map_err(|e| e.kind)));
        let outcome = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("reading a FIFO hangs");
        assert!(matches!(outcome, Err(FileErrorKind::NoWriter)), "{outcome:?}");

        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut write_end = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
        write_end.write_all(b"piped").unwrap();
        drop(write_end);
        assert_eq!(read_capped(format!("/proc/self/fd/{}", fds[0]), 1 << 10).unwrap(), "piped");
        // SAFETY: the read end is still open and owned here.
        unsafe { libc::close(fds[0]) };
        fs::remove_dir_all(&dir).unwrap();
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

    #[cfg(unix)]
    #[test]
    fn writes_respect_links_modes_devices_and_fifos() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt, symlink};
        let dir = scratch("kinds");
        // A symlink stays a link; its target is written.
        let target = dir.join("target.txt");
        fs::write(&target, b"old").unwrap();
        let link = dir.join("link.txt");
        symlink(&target, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"new");
        // A link to nothing is refused, not replaced by a file.
        let dangling = dir.join("dangling");
        symlink(dir.join("absent"), &dangling).unwrap();
        assert!(write_atomic(&dangling, b"x").is_err());
        assert!(fs::symlink_metadata(&dangling).unwrap().file_type().is_symlink());
        // The mode is kept.
        fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&target, b"again").unwrap();
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        // Hard links keep naming one file.
        let hard = dir.join("hard.txt");
        fs::hard_link(&target, &hard).unwrap();
        write_atomic(&target, b"shared").unwrap();
        assert_eq!(fs::read(&hard).unwrap(), b"shared");
        assert_eq!(fs::metadata(&hard).unwrap().ino(), fs::metadata(&target).unwrap().ino());
        // A character device is written through and stays a device.
        write_atomic("/dev/null", b"discarded").unwrap();
        assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        // A FIFO is refused at once (writing would wait for a reader) and stays a FIFO.
        let fifo = dir.join("fifo");
        if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
            let e = write_atomic(&fifo, b"x").unwrap_err();
            assert!(matches!(e.kind, FileErrorKind::NotWritable { what: "FIFO" }), "{e}");
            assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
        }
        // No temporary file is left behind.
        let hidden =
            fs::read_dir(&dir).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with('.'));
        assert_eq!(hidden.count(), 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Concurrent probes of one directory do not collide, and leave nothing behind.
    #[test]
    fn probes_are_unique_and_leave_nothing() {
        let dir = scratch("probe");
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| check_writable_dir(&dir).unwrap());
            }
        });
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        assert!(check_writable_dir(dir.join("missing")).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A set of files is written whole or not at all: a refused member leaves the others as
    /// they were, with no temporary behind.
    #[test]
    fn a_set_is_written_whole_or_not_at_all() {
        let dir = scratch("set");
        let (a, b, blocked) = (dir.join("t.csv"), dir.join("t.md"), dir.join("t.svg"));
        write_set(&[(&a, b"1"), (&b, b"1")]).unwrap();
        fs::create_dir(&blocked).unwrap();
        assert!(write_set(&[(&a, b"2"), (&b, b"2"), (&blocked, b"2")]).is_err());
        assert_eq!((fs::read(&a).unwrap(), fs::read(&b).unwrap()), (b"1".to_vec(), b"1".to_vec()));
        let mut left: Vec<String> =
            fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["t.csv", "t.md", "t.svg"]);
        write_set(&[(&a, b"3"), (&b, b"3")]).unwrap();
        assert_eq!(fs::read(&b).unwrap(), b"3");
        fs::remove_dir_all(&dir).unwrap();
    }
}
