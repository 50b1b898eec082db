//! The distributed part of the shim (`csrc/distributed.cpp`).
//!
//! libtorch_cpu.so carries c10d's ProcessGroupGloo, but the torch wheel ships
//! no gloo headers, so `ProcessGroupGloo.hpp` compiles only with gloo's
//! headers from elsewhere: `scripts/bootstrap-gloo.sh` links them at
//! `<repo>/.gloo`, handed over as `TCH_SCOPE_GLOO_INCLUDE` by
//! `.cargo/config.toml`. Without them the file compiles to stubs that
//! report why (`dist::Backend::Gloo.is_available()` is then false).
//!
//! NCCL is not built: `ProcessGroupNCCL.hpp` needs `cuda_runtime.h`'s
//! `crt/` headers, which the CUDA wheels don't ship, so `nccl` is a run-time
//! error even with a CUDA libtorch.

use std::env;
use std::path::{Path, PathBuf};

pub fn configure(build: &mut cc::Build, include: &Path) {
    println!("cargo::rerun-if-env-changed=TCH_SCOPE_GLOO_INCLUDE");
    build.file("csrc/distributed.cpp");
    let Some(gloo) = gloo_include() else {
        println!(
            "cargo::warning=tch-scope: no gloo headers (run scripts/bootstrap-gloo.sh or set \
             TCH_SCOPE_GLOO_INCLUDE); building without the `distributed` scope"
        );
        return;
    };
    // Watch the headers' own file: a link that appears later is covered
    // by the env var (cargo reruns a script when a watched path is missing,
    // every time, so a missing `.gloo` is not watched).
    println!(
        "cargo::rerun-if-changed={}",
        gloo.join("gloo/config.h").display()
    );
    build
        .include(&gloo)
        // c10d's headers reach torch/types.h (the C++ API's include root).
        .include(include.join("torch/csrc/api/include"))
        .define("USE_C10D_GLOO", None)
        .define("TCH_SCOPE_GLOO", None);
}

fn gloo_include() -> Option<PathBuf> {
    let dir = PathBuf::from(env::var_os("TCH_SCOPE_GLOO_INCLUDE")?);
    dir.join("gloo/config.h").exists().then_some(dir)
}
