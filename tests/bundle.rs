//! What a test binary needs to run outside its build tree, from the GPU
//! bundle (`make gpu-bundle`, run by scripts/gpu-run.sh), and the lines that
//! script reads: `GPU-SKIP <test>: <reason>` (a test that did not run here,
//! said so rather than passed) and `GPU-FIGURE key=value …` (a measurement
//! for gpu-summary.txt).
//!
//! `TCH_SCOPE_BUNDLE=<dir>`: the unpacked bundle. Its `tests/` replaces this
//! package's folder, which `CARGO_MANIFEST_DIR` names on the build machine.
//! `TCH_SCOPE_EXPECT_CUDA=1`: the machine has a CUDA device (its PyTorch
//! sees one), so a CUDA test that finds none fails instead of skipping.

use std::path::PathBuf;

/// The unpacked GPU bundle this binary runs from, if it does.
pub fn bundle() -> Option<PathBuf> {
    std::env::var_os("TCH_SCOPE_BUNDLE").map(PathBuf::from)
}

/// This package's folder (tests/): the bundle's copy when run from one.
pub fn tests_dir() -> PathBuf {
    bundle().map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), |b| b.join("tests"))
}

/// Says that `test` did not run here, and why, on a line gpu-run.sh reads.
pub fn skip(test: &str, reason: &str) {
    println!("GPU-SKIP {test}: {reason}");
}

/// Whether CUDA is here for `test`; if not, says so (`GPU-SKIP`) and the
/// test returns. Fails instead when `TCH_SCOPE_EXPECT_CUDA=1`: libtorch_cuda
/// not loaded on a machine with a GPU must not pass as a skip.
pub fn cuda_or_skip(test: &str) -> bool {
    if tch_scope::cuda_device_count() > 0 && tch::Cuda::is_available() {
        return true;
    }
    assert!(
        std::env::var_os("TCH_SCOPE_EXPECT_CUDA").is_none_or(|v| v != "1"),
        "TCH_SCOPE_EXPECT_CUDA=1, but CUDA is not available to this binary \
         (libtorch_cuda not loaded, or no device); built with CUDA: {}",
        tch_scope::built_with_cuda()
    );
    skip(test, "no CUDA device");
    false
}

/// A measurement line for gpu-summary.txt: `GPU-FIGURE k=v k=v …`.
pub fn figure(pairs: &[(&str, String)]) {
    let kv: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("GPU-FIGURE {}", kv.join(" "));
}
