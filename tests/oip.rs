//! The Open Inference Protocol codec (`tch_scope::serve::oip`) against the
//! protocol's own client: request bodies built by `tritonclient`'s builder
//! decode to its numpy arrays bitwise, responses we encode parse in
//! `tritonclient` to our tensors bitwise, and bad requests get a 400 with a
//! clear `{"error"}`. `tritonclient[http]` is installed (once per machine,
//! cached) by scripts/bootstrap-tritonclient.sh; where that cannot run, the
//! tests print why and pass without checking. One Python process per test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tch::Tensor;

#[path = "oip/errors.rs"]
mod errors;
#[path = "oip/requests.rs"]
mod requests;
#[path = "oip/responses.rs"]
mod responses;

/// The tritonclient venv's python, or why there is none.
fn python() -> Result<&'static Path, &'static str> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(|| {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bootstrap-tritonclient.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(String::as_str)
}

/// Runs tests/oip/`script` with the tritonclient venv's python on `dir`;
/// `None` (after printing why) where there is no such python.
fn run_python(test: &str, script: &str, dir: &Path) -> Option<()> {
    let py = match python() {
        Ok(py) => py,
        Err(why) => {
            eprintln!("{test}: skipped, no tritonclient: {why}");
            return None;
        }
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("oip")
        .join(script);
    let out = Command::new(py)
        .arg(&path)
        .arg(dir)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("oip")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// A CPU tensor's elements as their bytes, row-major (little-endian on the
/// machines we test on, as the protocol's are).
fn raw_bytes(t: &Tensor) -> Vec<u8> {
    let t = t.contiguous();
    let n = t.numel();
    let mut out = vec![0u8; n * t.kind().elt_size_in_bytes()];
    t.copy_data_u8(&mut out, n);
    out
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
