//! The `.pt2` packages `scripts/export_pt2.py` exports with the bootstrap's
//! PyTorch, shared by the test binaries that use them (`aoti`, `serve`):
//! one folder under the target dir, keyed by the torch version and the
//! script's hash, exported on first use.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/export_pt2.py");

/// The bootstrap's torch folder (`.libtorch` points into its venv).
fn torch_dir() -> Option<PathBuf> {
    std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch")).ok()
}

/// The python that exports: `TCH_SCOPE_PYTHON`, or the bootstrap venv's.
fn python() -> Option<PathBuf> {
    if let Some(py) = std::env::var_os("TCH_SCOPE_PYTHON") {
        return Some(py.into());
    }
    // Resolved first: python finds its venv from its own path.
    let py = torch_dir()?.join("../../../../bin/python");
    py.exists().then_some(py)
}

/// `__version__` of torch/version.py, e.g. "2.13.0+cu130".
fn torch_version() -> String {
    let text = torch_dir()
        .and_then(|t| std::fs::read_to_string(t.join("version.py")).ok())
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("__version__ = "))
        .map(|v| v.trim().trim_matches(['\'', '"']).to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// FNV-1a: a hash that stays the same across Rust versions.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The folder of exported packages, exported on first use; `None` (and a
/// note on stdout) where there is no PyTorch to export them with.
pub fn packages() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = std::fs::read(SCRIPT).expect("scripts/export_pt2.py");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("aoti")
            .join(format!("{}-{:016x}", torch_version(), fnv(&script)));
        if dir.join("wide.json").exists() {
            return Some(dir);
        }
        let Some(py) = python() else {
            println!("skipped: no PyTorch python to export .pt2 packages with");
            return None;
        };
        let t = Instant::now();
        let out = std::process::Command::new(&py)
            .arg(SCRIPT)
            .arg(&dir)
            .output()
            .expect("run the export script");
        assert!(
            out.status.success(),
            "{py:?} {SCRIPT} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        println!(
            "exported .pt2 packages into {} in {:.0?}",
            dir.display(),
            t.elapsed()
        );
        Some(dir)
    })
    .as_deref()
}
