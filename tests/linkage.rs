//! libtorch_cuda must stay loaded when the libtorch found has it;
//! `--as-needed` would otherwise drop it and hide CUDA (tch-rs #907, #984).

use std::path::Path;

#[test]
fn libtorch_cuda_is_loaded_whenever_libtorch_has_it() {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    // The folder libtorch_cpu.so was loaded from: the rpath's, or, from the
    // GPU bundle, the one LD_LIBRARY_PATH names.
    let cpu = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libtorch_cpu.so"))
        .expect("libtorch_cpu.so not loaded");
    let lib = Path::new(cpu).parent().unwrap();
    let has_cuda = lib.join("libtorch_cuda.so").exists();
    assert_eq!(tch_scope::built_with_cuda(), has_cuda);
    if has_cuda {
        assert!(
            maps.contains("libtorch_cuda.so"),
            "{} has libtorch_cuda.so, but it is not among this binary's loaded libraries",
            lib.display()
        );
        // Loaded, it registers CUDA as the accelerator: both views agree.
        assert_eq!(
            tch_scope::cuda_device_count(),
            tch::Cuda::device_count() as usize
        );
    }
}

#[test]
fn libtorch_is_found_through_the_rpath() {
    if crate::bundle::bundle().is_some() {
        let why = "the GPU bundle finds libtorch through LD_LIBRARY_PATH (its rpath is the build machine's)";
        crate::bundle::skip("linkage::libtorch_is_found_through_the_rpath", why);
        return;
    }
    // `make test` runs without LD_LIBRARY_PATH naming libtorch.
    let ld = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    assert!(
        !ld.contains(env!("TCH_SCOPE_LIBTORCH_LIB")),
        "LD_LIBRARY_PATH names libtorch: {ld}"
    );
}
