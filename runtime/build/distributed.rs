//! The distributed part of the shim (`csrc/distributed.cpp`), built with the
//! `distributed` feature.
//!
//! libtorch_cpu.so carries c10d's ProcessGroupGloo, but the torch wheel ships
//! no gloo headers, so `ProcessGroupGloo.hpp` compiles only with gloo's
//! headers from elsewhere (nothing of that gloo is linked): the folder in
//! `TCH_SCOPE_GLOO_INCLUDE`, else the system's include folders, where
//! Debian's `libgloo-dev` puts them. In this repository
//! `scripts/bootstrap-gloo.sh` links them at `<repo>/.gloo`, handed over as
//! `TCH_SCOPE_GLOO_INCLUDE` by `.cargo/config.toml`. With the feature on and
//! no headers found, the build fails saying what to install.
//!
//! NCCL (`csrc/nccl.cpp`) is built when the libtorch has CUDA and the CUDA
//! and NCCL headers are found: beside the bootstrap's wheel
//! (`<torch>/../nvidia/cu*/include`, completed with `crt/` and `nv/` by
//! `scripts/bootstrap-cuda-headers.sh`, and `<torch>/../nvidia/nccl/include`)
//! or in `TCH_SCOPE_CUDA_INCLUDE` (folders joined by `:`). Otherwise `nccl`
//! is a run-time `ScopeError` that says why.

use std::env;
use std::path::{Path, PathBuf};

/// Include folders for `csrc/nccl.cpp`, when it can be built.
pub struct Nccl(Vec<PathBuf>);

pub fn configure(build: &mut cc::Build, include: &Path, lib: &Path) -> Option<Nccl> {
    println!("cargo::rerun-if-env-changed=TCH_SCOPE_GLOO_INCLUDE");
    let gloo = gloo_include();
    // Watch the headers' own file: a link that appears later is covered
    // by the env var (cargo reruns a script when a watched path is missing,
    // every time, so a missing `.gloo` is not watched).
    println!(
        "cargo::rerun-if-changed={}",
        gloo.dir().join("gloo/config.h").display()
    );
    if let Gloo::Given(dir) = &gloo {
        build.include(dir);
    }
    build
        // c10d's headers reach torch/types.h (the C++ API's include root).
        .include(include.join("torch/csrc/api/include"))
        .define("USE_C10D_GLOO", None)
        .define("TCH_SCOPE_GLOO", None);
    let nccl = nccl_include(include, lib)?;
    build.define("TCH_SCOPE_NCCL", None);
    Some(Nccl(nccl))
}

/// Compiles `csrc/nccl.cpp` into an archive of its own, after the shim's
/// (which refers to it), with the CUDA defines only it may see.
/// `build` is the shim's common base with `csrc/nccl.cpp` (build.rs).
pub fn build_nccl(Nccl(dirs): Nccl, mut build: cc::Build, include: &Path, lib: &Path) {
    build
        .include(include.join("torch/csrc/api/include"))
        .includes(&dirs)
        .define("USE_C10D_NCCL", None)
        .define("USE_CUDA", None)
        .flag_if_supported("-Wno-interference-size");
    build.compile("tch_scope_nccl");
    // ProcessGroupNCCL's code is in libtorch_cuda (linked by build.rs);
    // its inline parts call NCCL, which the linker wants named too.
    if let Some(nccl_lib) = nccl_lib(lib) {
        println!("cargo::rustc-link-search=native={}", nccl_lib.display());
        println!("cargo::rustc-link-arg=-Wl,-rpath,{}", nccl_lib.display());
    }
    println!("cargo::rustc-link-lib=dylib=torch_cuda");
}

/// The CUDA and NCCL include folders, if every header nccl.cpp reaches is
/// there; `None` (with a build warning) otherwise.
fn nccl_include(include: &Path, lib: &Path) -> Option<Vec<PathBuf>> {
    println!("cargo::rerun-if-env-changed=TCH_SCOPE_CUDA_INCLUDE");
    if !lib.join("libtorch_cuda.so").exists() {
        return None;
    }
    let dirs: Vec<PathBuf> = match env::var_os("TCH_SCOPE_CUDA_INCLUDE") {
        Some(list) => env::split_paths(&list).collect(),
        None => {
            let nvidia = include.join("../../nvidia");
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(&nvidia)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join("include"))
                .filter(|p| p.join("cuda_runtime.h").exists())
                .collect();
            dirs.push(nvidia.join("nccl/include"));
            dirs
        }
    };
    let needed = ["cuda_runtime.h", "crt/host_config.h", "nv/target", "nccl.h"];
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|h| !dirs.iter().any(|d| d.join(h).exists()))
        .collect();
    // Watched either way, so headers installed later turn NCCL on.
    for d in dirs.iter().filter(|d| d.exists()) {
        println!("cargo::rerun-if-changed={}", d.display());
    }
    if missing.is_empty() {
        return Some(dirs);
    }
    println!(
        "cargo::warning=tch-scope: CUDA libtorch without {} (run scripts/bootstrap-cuda-headers.sh \
         or set TCH_SCOPE_CUDA_INCLUDE); building without the nccl backend",
        missing.join(", ")
    );
    None
}

/// NCCL's lib folder beside the wheel's torch, if there.
fn nccl_lib(lib: &Path) -> Option<PathBuf> {
    let dir = lib.join("../../nvidia/nccl/lib");
    dir.join("libnccl.so.2").exists().then_some(dir)
}

/// Where gloo's headers are.
enum Gloo {
    /// `TCH_SCOPE_GLOO_INCLUDE`: passed to the compiler.
    Given(PathBuf),
    /// A folder the compiler searches anyway.
    System(PathBuf),
}

impl Gloo {
    fn dir(&self) -> &Path {
        match self {
            Gloo::Given(d) | Gloo::System(d) => d,
        }
    }
}

/// `TCH_SCOPE_GLOO_INCLUDE`, else `/usr/include`, else `/usr/local/include`:
/// the first holding `gloo/config.h`. Panics (failing the build) if none.
fn gloo_include() -> Gloo {
    let has = |d: &Path| d.join("gloo/config.h").exists();
    let given = env::var_os("TCH_SCOPE_GLOO_INCLUDE").map(PathBuf::from);
    if let Some(dir) = given.as_ref().filter(|d| has(d)) {
        return Gloo::Given(dir.clone());
    }
    let system = ["/usr/include", "/usr/local/include"];
    if let Some(dir) = system.into_iter().map(PathBuf::from).find(|d| has(d)) {
        return Gloo::System(dir);
    }
    let given = match given {
        Some(d) => format!(
            "TCH_SCOPE_GLOO_INCLUDE={} (no gloo/config.h there), ",
            d.display()
        ),
        None => String::new(),
    };
    panic!(
        "tch-scope's `distributed` feature needs gloo's C++ headers, found in none of {given}{}: \
         install them with `apt-get install libgloo-dev`, or set `TCH_SCOPE_GLOO_INCLUDE` to a \
         folder containing gloo/",
        system.join(", ")
    );
}
