//! What the checkpoint tests share.

use std::fs;
use std::path::{Path, PathBuf};

/// A directory of its own under the system's temporary directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory named after `name` and the process.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("einsum-models-checkpoint-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
