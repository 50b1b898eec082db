//! PyTorch's python, the oracle the tests compare with: the bootstrap's
//! (beside `.libtorch`), or `TCH_SCOPE_PYTHON` (the GPU bundle's machine
//! has its own PyTorch). Shared by the test binaries that ask it.

/// Runs `script` with PyTorch's python and returns its stdout, trimmed;
/// `None` where there is no such python.
///
/// # Panics
/// When the script fails: its stderr.
pub fn python(script: &str) -> Option<String> {
    let py = std::env::var_os("TCH_SCOPE_PYTHON")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            // Resolved first: python finds its venv from its own path.
            let torch = std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch"));
            torch.ok().map(|t| t.join("../../../../bin/python"))
        })?;
    let out = std::process::Command::new(&py)
        .args(["-W", "ignore", "-c", script])
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "{py:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
