//! Temporary files that never outlive their purpose: removed when dropped, and removed when
//! the process is interrupted.
//!
//! [`fsio`](crate::fsio) writes every output through a [`TemporaryFile`] beside it, renamed
//! into place once complete. Dropping one that was not renamed removes it (an error
//! part-way), and every live one is registered, so that a binary that calls
//! [`remove_temporaries_on_signals`] before starting any thread also removes them when
//! SIGINT or SIGTERM arrives between creation and rename, instead of leaving hidden
//! `.NAME.PID.N.tmp` files behind. Libraries (the Python module) leave the signals to their
//! host process: there, an interrupt raises in the caller and the drop removes the file.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The temporary files that exist now, removed by the signal thread.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The registry, even after a panic while it was held (a list of paths cannot be left
/// inconsistent by one).
fn live() -> MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A new file beside a destination, under a name no other writer uses, that is removed on
/// drop unless [`persist`](Self::persist) renamed it into place.
#[derive(Debug)]
pub struct TemporaryFile {
    path: PathBuf,
    persisted: bool,
}

impl TemporaryFile {
    /// Creates (exclusively, so a link planted under its name is never followed) an empty
    /// file in `destination`'s directory named `.NAME.PID.N.tmp`, with this process's id and
    /// a per-process counter; the open file is returned with it.
    pub fn beside(destination: &Path) -> io::Result<(TemporaryFile, File)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut name = std::ffi::OsString::from(".");
        name.push(destination.file_name().unwrap_or(destination.as_os_str()));
        name.push(format!(".{}.{n}.tmp", std::process::id()));
        let path = destination.with_file_name(name);
        // Registered before it exists, so that no interrupt falls between the two.
        live().push(path.clone());
        let temporary = TemporaryFile { path, persisted: false };
        let file = OpenOptions::new().write(true).create_new(true).open(&temporary.path)?;
        Ok((temporary, file))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames it over `target`; on an error it stays temporary (and is removed on drop).
    pub fn persist(mut self, target: &Path) -> io::Result<()> {
        fs::rename(&self.path, target)?;
        self.persisted = true;
        Ok(())
    }
}

impl Drop for TemporaryFile {
    fn drop(&mut self) {
        let mut live = live();
        if !self.persisted {
            // Best effort: it may not exist (its creation failed).
            let _ = fs::remove_file(&self.path);
        }
        if let Some(i) = live.iter().position(|p| *p == self.path) {
            live.swap_remove(i);
        }
    }
}

/// Makes SIGINT and SIGTERM remove every live [`TemporaryFile`] before the process ends by
/// that signal (as its default action would have ended it, so a shell sees the same status).
///
/// It blocks both signals in the calling thread, which every thread started afterwards
/// inherits, and waits for them on a thread of its own; so call it first thing in `main`,
/// before any other thread exists (one started earlier would still take the default action).
/// Child processes inherit the blocked mask, so a binary that starts any must unblock the
/// signals in them. Returns the operating system's error if the mask or the thread cannot be
/// set up.
#[cfg(unix)]
pub fn remove_temporaries_on_signals() -> io::Result<()> {
    // SAFETY: `sigset_t` is plain data that `sigemptyset` initialises; the calls below only
    // read and write the local sets and the calling thread's signal mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        set
    };
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let mut signal = 0;
        // SAFETY: `set` is an initialised signal set, `signal` a valid out-parameter.
        while unsafe { libc::sigwait(&set, &mut signal) } != 0 {}
        // Held until the process ends, so no new temporary appears after the sweep.
        let live = live();
        for path in live.iter() {
            let _ = fs::remove_file(path);
        }
        // SAFETY: restoring the default action and unblocking the one signal in this thread,
        // then raising it there, ends the process as the signal would have.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, signal);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::raise(signal);
        }
        std::process::exit(128 + signal);
    })?;
    Ok(())
}

/// Elsewhere signals keep their default action (temporaries are still removed on drop).
#[cfg(not(unix))]
pub fn remove_temporaries_on_signals() -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn dropped_unless_persisted_and_registered_while_alive() {
        let dir = std::env::temp_dir().join(format!("einsum-core-temporary-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.txt");
        let (temp, mut file) = TemporaryFile::beside(&target).unwrap();
        file.write_all(b"x").unwrap();
        let path = temp.path().to_path_buf();
        assert!(live().contains(&path) && path.exists());
        drop(temp);
        assert!(!live().contains(&path) && !path.exists(), "dropped without persisting: removed");
        let (temp, _) = TemporaryFile::beside(&target).unwrap();
        let path = temp.path().to_path_buf();
        temp.persist(&target).unwrap();
        assert!(!live().contains(&path) && target.exists() && !path.exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
