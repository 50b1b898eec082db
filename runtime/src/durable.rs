//! Crash-safe file replacement, shared by `checkpoint` and `profile`: write
//! a temporary file in the destination's folder, fsync it, rename it over
//! the destination, fsync the folder. A reader (or a process killed at any
//! moment) sees the old file or the new one, never a torn one.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temporary path next to `path`: `.NAME.PID.N.tmp.EXT`, `N` a counter
/// of the process, so two writers of one path (two threads, two scopes)
/// never share a temporary file; the extension is kept (libraries pick the
/// format from it). A process killed mid-write leaves at most this file
/// behind; the destination is untouched.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path.file_stem().unwrap_or_default().to_string_lossy();
    let n = N.fetch_add(1, Ordering::Relaxed);
    let mut tmp = format!(".{name}.{}.{n}.tmp", std::process::id());
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

/// Checks at a scope's entry that `path` can be written on exit: its
/// folder exists and a file can be created in it, and `path` is not a
/// folder. Creates (and removes) a temporary file to find out.
pub(crate) fn check_writable(path: &Path) -> Result<(), String> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{} is not a folder", dir.display())),
        Err(e) => return Err(format!("its folder {} can't be used: {e}", dir.display())),
    }
    if fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err("it is a folder".into());
    }
    let probe = temp_path(path);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| format!("its folder {} is not writable: {e}", dir.display()))?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// A libtorch message without the C++ backtrace c10 appends to it
/// ("Exception raised from … frame #0 …").
pub(crate) fn without_backtrace(msg: &str) -> &str {
    msg.find("Exception raised from")
        .map_or(msg, |i| &msg[..i])
        .trim_end()
}
