//! Crash-safe file replacement, shared by `checkpoint` and `profile`: write
//! a temporary file in the destination's folder, fsync it, rename it over
//! the destination, fsync the folder. A reader (or a process killed at any
//! moment) sees the old file or the new one, never a torn one.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

/// A temporary path next to `path`: `.NAME.PID.tmp.EXT`, keeping the
/// extension (libraries pick the format from it). A process killed mid-write
/// leaves at most this file behind; the destination is untouched.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_stem().unwrap_or_default().to_string_lossy();
    let mut tmp = format!(".{name}.{}.tmp", std::process::id());
    if let Some(ext) = path.extension() {
        tmp.push('.');
        tmp.push_str(&ext.to_string_lossy());
    }
    path.with_file_name(tmp)
}

/// Calls `write(temp)` and moves the result over `path` durably. On failure
/// the temporary file is removed and `path` keeps its old contents.
pub(crate) fn replace(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), String> {
    let tmp = temp_path(path);
    let result = write(&tmp).and_then(|()| {
        let io = |what: &str, e: io::Error| format!("{what} {}: {e}", tmp.display());
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| io("cannot fsync", e))?;
        fs::rename(&tmp, path).map_err(|e| io("cannot rename", e))?;
        sync_dir(path).map_err(|e| format!("cannot fsync the folder of {}: {e}", path.display()))
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Makes the rename itself durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}
