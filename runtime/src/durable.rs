//! Crash-safe file replacement, shared by `checkpoint` and `profile`: write
//! a temporary file in the destination's folder, fsync it, rename it over
//! the destination, fsync the folder. A reader (or a process killed at any
//! moment) sees the old file or the new one, never a torn one.
//!
//! Two rules on top of that:
//! - **Every write is checked.** [`Output`] writes through a buffer and
//!   keeps the first failure (a full disk, `RLIMIT_FSIZE`) for
//!   [`Output::finish`], which also checks the final flush: a file that
//!   was not written in full is never renamed over the destination.
//! - **The order of the saves decides.** Each save to a destination takes a
//!   [`Turn`] when it begins; a save whose turn is older than the last one
//!   renamed over the destination is dropped instead of renamed, so the
//!   destination keeps the save that began last, however long each took to
//!   write (within this process).
//!
//! A save whose rename succeeded but whose folder's fsync then failed is
//! **saved, not failed**: the new file is in place and complete (its data
//! was fsynced before the rename), every reader sees it, and the promise
//! above still holds after a power loss or an OS crash (the old file or the
//! new one, never a torn one). What the failed fsync leaves unconfirmed is
//! only that the new file, rather than the old one, survives such a crash.
//! So it is [`Replaced::Unsynced`], not an error: the caller's save counts
//! as done, and [`unsynced`] tells the exit hook (a notice, as a
//! `tracing` event too with the `tracing` feature, never the `Err` of a
//! `try_scoped!`), since a folder that can't be fsynced is a disk or a
//! file system to look at.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::sync::lock;

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

/// The folder a file `path` is renamed into.
fn folder(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// What identifies the destination `path` among the saves of this process:
/// its folder canonicalized (`./a/../b/x.ot` and `b/x.ot` are one file),
/// joined with its own name, not resolved (a rename replaces a symbolic
/// link, not its target). `path` itself when the folder can't be resolved.
pub(crate) fn destination(path: &Path) -> PathBuf {
    match (fs::canonicalize(folder(path)), path.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path.to_path_buf(),
    }
}

/// Per destination: the last turn given, the last one renamed over it,
/// and how many saves hold a turn (the entry goes when none does).
#[derive(Default)]
struct Order {
    given: u64,
    renamed: u64,
    holders: usize,
}

static ORDERS: Mutex<Option<HashMap<PathBuf, Order>>> = Mutex::new(None);

fn orders() -> MutexGuard<'static, Option<HashMap<PathBuf, Order>>> {
    // The map stays consistent between statements: a poisoned lock (a
    // panic elsewhere while holding it) changes nothing here.
    lock(&ORDERS)
}

/// A save's place among the saves to one destination, taken when the save
/// begins (a checkpoint's exit): of two saves to one path, the path keeps
/// the one whose turn was taken last.
#[derive(Debug)]
pub(crate) struct Turn {
    destination: PathBuf,
    n: u64,
}

impl Turn {
    /// The next turn for `destination` (see [`destination`]).
    pub(crate) fn take(destination: PathBuf) -> Turn {
        let mut orders = orders();
        let order = orders
            .get_or_insert_with(HashMap::new)
            .entry(destination.clone())
            .or_default();
        order.given += 1;
        order.holders += 1;
        Turn {
            destination,
            n: order.given,
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut orders = orders();
        let Some(map) = orders.as_mut() else { return };
        if let Some(order) = map.get_mut(&self.destination) {
            order.holders -= 1;
            if order.holders == 0 {
                map.remove(&self.destination);
            }
        }
    }
}

/// How a save in [`replace_in_turn`] ended well.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replaced {
    /// The new file is in place, durably.
    Written,
    /// The new file is in place and complete, but the fsync of its folder
    /// failed (the reason): a power loss or an OS crash may bring back the
    /// previous file (see the module docs). Saved, not failed.
    Unsynced(String),
    /// A save that began later was renamed over the destination first:
    /// this one was dropped, the destination keeps the later one.
    Superseded,
}

/// Calls `write(temp)` and moves the result over `path` durably. On failure
/// the temporary file is removed and `path` keeps its old contents. A save
/// whose folder could not be fsynced is `Ok` (it is in place and complete)
/// and is told to the exit hook as a notice (see [`unsynced`]).
pub(crate) fn replace(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), String> {
    if let Replaced::Unsynced(why) = replace_in_turn(path, &Turn::take(destination(path)), write)? {
        unsynced("save", path, &why);
    }
    Ok(())
}

/// Tells the exit hook that `scope` saved `path` in full but could not
/// fsync its folder (`why`): a notice, never the `Err` of the scope being
/// left (see the module docs).
pub(crate) fn unsynced(scope: &'static str, path: &Path, why: &str) {
    crate::exit::notify(crate::ExitError::new(
        scope,
        format!(
            "saved {} in full, but {why}: the save is not confirmed durable \
             (after a power loss or an OS crash the path may hold the previous \
             file; never a torn one)",
            path.display()
        ),
    ));
}

/// [`replace`] in `turn`: the rename happens only if no save with a later
/// turn has been renamed over `path` meanwhile.
///
/// # Errors
/// The write, the temporary file's fsync or the rename failed: `path`
/// keeps its old contents. A failed fsync of the folder after the rename
/// is no error: [`Replaced::Unsynced`].
pub(crate) fn replace_in_turn(
    path: &Path,
    turn: &Turn,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<Replaced, String> {
    let tmp = temp_path(path);
    let io = |what: &str, e: io::Error| format!("{what} {}: {e}", tmp.display());
    let result = write(&tmp).and_then(|()| {
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| io("cannot fsync", e))?;
        {
            // Renames to one destination in the order of their turns: the
            // check and the rename under one lock.
            let mut orders = orders();
            let order = orders
                .get_or_insert_with(HashMap::new)
                .entry(turn.destination.clone())
                .or_default();
            if order.renamed > turn.n {
                return Ok(Replaced::Superseded);
            }
            fs::rename(&tmp, path).map_err(|e| io("cannot rename", e))?;
            order.renamed = turn.n;
        }
        // Renamed: from here on the save is done, whatever the fsync says.
        Ok(match sync_dir(path) {
            Ok(()) => Replaced::Written,
            Err(e) => Replaced::Unsynced(format!(
                "could not fsync its folder {}: {e}",
                folder(path).display()
            )),
        })
    });
    if !matches!(result, Ok(Replaced::Written | Replaced::Unsynced(_))) {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Makes the rename itself durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    if let Some(e) = crate::ffi::injected_fault("durable::sync_dir") {
        return Err(io::Error::other(e));
    }
    File::open(folder(path))?.sync_all()
}

/// A file being written whose every write and flush is checked. Libraries
/// that write through a callback ([`Output::writer`], given to libtorch's
/// archive writer) are told every write succeeded: a failure is kept, the
/// rest discarded, and [`Output::finish`] reports the first one. So no
/// error is thrown back into C++ (where libtorch's writer may not survive
/// it: an exception out of its `ofstream` aborted the process), and none
/// is lost either (libtorch never checks its file's final `close()`).
#[derive(Debug)]
pub(crate) struct Output {
    sink: Rc<RefCell<Sink>>,
    path: PathBuf,
}

#[derive(Debug)]
struct Sink {
    file: Option<BufWriter<File>>,
    error: Option<io::Error>,
}

impl Sink {
    fn put(&mut self, buf: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if let Some(f) = self.file.as_mut()
            && let Err(e) = f.write_all(buf)
        {
            self.error = Some(e);
        }
    }
}

/// The writing end of an [`Output`], owned by whoever writes (it may keep
/// it until it is done: libtorch's writer drops it at the end).
#[derive(Debug)]
pub(crate) struct OutputWriter(Rc<RefCell<Sink>>);

impl Write for OutputWriter {
    /// Always the whole of `buf`: a failure is kept for
    /// [`Output::finish`] (see [`Output`]).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().put(buf);
        Ok(buf.len())
    }

    /// Nothing to do before [`Output::finish`], which flushes and checks.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output {
    /// Creates (or truncates) the file at `path`.
    pub(crate) fn create(path: &Path) -> Result<Self, String> {
        let file =
            File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(Output {
            sink: Rc::new(RefCell::new(Sink {
                file: Some(BufWriter::with_capacity(1 << 20, file)),
                error: None,
            })),
            path: path.to_path_buf(),
        })
    }

    /// A writer into the file.
    pub(crate) fn writer(&self) -> OutputWriter {
        OutputWriter(Rc::clone(&self.sink))
    }

    /// Flushes the buffer and syncs the file to the disk.
    ///
    /// # Errors
    /// The first failed write, else a failed flush or fsync.
    pub(crate) fn finish(self) -> Result<(), String> {
        let fail = |e: io::Error| format!("cannot write {}: {e}", self.path.display());
        let mut sink = self.sink.borrow_mut();
        let file = sink.file.take();
        if let Some(e) = sink.error.take() {
            return Err(fail(e));
        }
        let Some(file) = file else {
            return Ok(());
        };
        let file = file.into_inner().map_err(|e| fail(e.into_error()))?;
        file.sync_all().map_err(fail)
    }
}

/// Checks at a scope's entry that `path` can be written on exit: its
/// folder exists and a file can be created in it, and `path` is not a
/// folder. Creates (and removes) a temporary file to find out.
pub(crate) fn check_writable(path: &Path) -> Result<(), String> {
    let dir = folder(path);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tch-scope-durable-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_save_that_began_last_is_kept() {
        let dir = scratch("turns");
        let path = dir.join("f.bin");
        let write = |bytes: &'static [u8]| {
            move |tmp: &Path| {
                let out = Output::create(tmp)?;
                out.writer().write_all(bytes).unwrap();
                out.finish()
            }
        };
        let (first, second) = (
            Turn::take(destination(&path)),
            Turn::take(destination(&path)),
        );
        // The second renames first: the first, finishing after it, is dropped.
        assert_eq!(
            replace_in_turn(&path, &second, write(b"second")),
            Ok(Replaced::Written)
        );
        assert_eq!(
            replace_in_turn(&path, &first, write(b"first")),
            Ok(Replaced::Superseded)
        );
        assert_eq!(fs::read(&path).unwrap(), b"second");
        drop((first, second));
        // Another spelling of the same path shares the order.
        let other = dir.join("..").join(dir.file_name().unwrap()).join("f.bin");
        assert_eq!(destination(&other), destination(&path));
        replace(&other, write(b"third")).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"third");
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary file left"
        );
        let key = destination(&path);
        assert!(!orders().as_ref().is_some_and(|m| m.contains_key(&key)));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The folder's fsync fails after the rename: the save is in place and
    /// complete, reported as saved but not confirmed durable.
    #[test]
    fn a_failed_folder_fsync_after_the_rename_is_a_save() {
        let dir = scratch("unsynced");
        let path = dir.join("f.bin");
        fs::write(&path, b"old").unwrap();
        let write = |tmp: &Path| {
            let out = Output::create(tmp)?;
            out.writer().write_all(b"new").unwrap();
            out.finish()
        };
        crate::ffi::inject_fault("durable::sync_dir", 1);
        let r = replace_in_turn(&path, &Turn::take(destination(&path)), write);
        let Ok(Replaced::Unsynced(why)) = r else {
            panic!("saved, not durable: {r:?}");
        };
        assert!(
            why.starts_with("could not fsync its folder ")
                && why.ends_with(": injected fault in durable::sync_dir"),
            "{why}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"new");
        // `replace` (profile, trace): `Ok`, the notice goes to the hook.
        crate::ffi::inject_fault("durable::sync_dir", 1);
        let write = |tmp: &Path| {
            let out = Output::create(tmp)?;
            out.writer().write_all(b"newer").unwrap();
            out.finish()
        };
        assert_eq!(replace(&path, write), Ok(()));
        assert_eq!(fs::read(&path).unwrap(), b"newer");
        assert!(
            crate::ffi::injected_fault("durable::sync_dir").is_none(),
            "used up"
        );
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary file left"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_is_reported_and_nothing_is_renamed() {
        let dir = scratch("failed");
        let path = dir.join("f.bin");
        fs::write(&path, b"old").unwrap();
        let r = replace(&path, |tmp| {
            let out = Output::create(tmp)?;
            let mut w = out.writer();
            w.write_all(b"new").unwrap();
            out.sink.borrow_mut().error = Some(io::Error::other("disk full"));
            w.write_all(b" and more").unwrap(); // still "accepted"
            out.finish()
        });
        let e = r.unwrap_err();
        assert!(
            e.starts_with("cannot write ") && e.ends_with(": disk full"),
            "{e}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary file left"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
