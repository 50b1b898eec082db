//! Compiles the C++ shim in `csrc/` against the libtorch that torch-sys found.
//!
//! torch-sys (`links = "tch"`) exports its lib dir as `DEP_TCH_LIBTORCH_LIB`;
//! the headers sit beside it in `../include`. The CUDA half is built only
//! when that libtorch has `libtorch_cuda.so`, and then `cfg(tch_scope_cuda)`
//! is set for the Rust side; the distributed half only with the
//! `distributed` feature.
//!
//! With the `doc-only` feature (docs.rs, which also sets `DOCS_RS`) torch-sys
//! looks for no libtorch, and this script builds and links nothing: rustdoc
//! needs only the Rust side, whose `extern "C"` declarations are never linked.

use std::env;
use std::path::PathBuf;

#[path = "build/distributed.rs"]
mod distributed;

/// The shim's translation units, into the `tch_scope_shim` archive. Each
/// includes half of the shim's sources (`csrc/*.cpp`; their headers are
/// `csrc/common.h` and one per area, all included by `csrc/shim.h`), so
/// that libtorch's headers are parsed twice, once per core, and not once
/// per source: about 20 s of a cold build where 17 units took 2 minutes.
const SHIM: &[&str] = &["csrc/shim_a.cpp", "csrc/shim_b.cpp"];
/// With the `distributed` feature, into the same archive.
const DISTRIBUTED: &str = "csrc/distributed.cpp";
/// With the `distributed` feature, a CUDA libtorch and the NCCL headers,
/// into an archive of its own (`tch_scope_nccl`, see build/distributed.rs).
const NCCL: &str = "csrc/nccl.cpp";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tch_scope_cuda)");
    println!("cargo::rerun-if-changed=csrc");
    println!("cargo::rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo::rerun-if-env-changed=TCH_SCOPE_SANITIZE");
    println!("cargo::rerun-if-env-changed=TCH_SCOPE_SHIM_DEBUG");
    println!("cargo::rerun-if-env-changed=DOCS_RS");
    if env::var_os("CARGO_FEATURE_DOC_ONLY").is_some() || env::var_os("DOCS_RS").is_some() {
        return;
    }

    let lib = PathBuf::from(env::var("DEP_TCH_LIBTORCH_LIB").expect(
        "torch-sys did not export DEP_TCH_LIBTORCH_LIB; is tch/torch-sys within >=0.24, <0.27?",
    ));
    let root = lib
        .parent()
        .expect("libtorch lib dir has a parent")
        .to_path_buf();
    let include = root.join("include");
    assert!(
        include.join("c10/core/AutogradState.h").exists(),
        "libtorch headers not found in {} (LIBTORCH should point at a folder with lib/ and include/)",
        include.display()
    );
    let cuda = lib.join("libtorch_cuda.so").exists();

    let mut build = base(&include);
    build.files(SHIM);
    let nccl = if env::var_os("CARGO_FEATURE_DISTRIBUTED").is_some() {
        build.file(DISTRIBUTED);
        distributed::configure(&mut build, &include, &lib)
    } else {
        None
    };
    let asan_runtime = sanitize(&mut build);
    if cuda {
        build.define("TCH_SCOPE_CUDA", None);
        println!("cargo::rustc-cfg=tch_scope_cuda");
    }
    build.compile("tch_scope_shim");
    if let Some(nccl) = nccl {
        let mut build = base(&include);
        build.file(NCCL);
        distributed::build_nccl(nccl, build, &include, &lib);
    }
    if cuda {
        // After the archive that refers to it, so the reference keeps it.
        println!("cargo::rustc-link-lib=dylib=torch_cuda");
    }
    println!("cargo::rustc-link-lib=dylib=c10");
    println!("cargo::rustc-link-lib=dylib=torch_cpu");
    if let Some(dir) = asan_runtime {
        // The instrumented shim needs the sanitizer runtime; `make asan`
        // also preloads it, as it must come first in the library list.
        println!("cargo::rustc-link-search=native={}", dir.display());
        println!("cargo::rustc-link-lib=dylib=clang_rt.asan-x86_64");
        println!("cargo::rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }

    // Our own tests, benches and examples find libtorch through an rpath;
    // dependents get the lib dir via `links` metadata
    // (DEP_TCH_SCOPE_LIBTORCH_LIB) for the same.
    println!("cargo::rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo::metadata=libtorch_lib={}", lib.display());
    println!("cargo::metadata=cuda={}", cuda as u8);
}

/// What every archive of the shim is compiled with: C++20 (libtorch 2.13's
/// headers use bit-field initializers), position-independent, libtorch's
/// headers and its C++11 ABI.
fn base(include: &std::path::Path) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .pic(true)
        // No debug info whatever the profile (`TCH_SCOPE_SHIM_DEBUG=1` for
        // it): libtorch's headers make `-g` slow, and the same arguments in
        // every profile let ccache reuse one build of the shim across target
        // dirs (trybuild's, a downstream crate's).
        .debug(env::var_os("TCH_SCOPE_SHIM_DEBUG").is_some())
        .std("c++20")
        .include(include)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-Wno-unused-parameter")
        // GCC 12's false positive on std::string assignment at -O2 and
        // above (GCC bug 105329), which cargo would show every user of a
        // release build.
        .flag_if_supported("-Wno-restrict");
    build
}

/// `TCH_SCOPE_SANITIZE=address` (set by `make asan`) builds the shim with
/// clang's AddressSanitizer (and so LeakSanitizer). Returns the
/// folder of clang's shared ASan runtime, asked of the compiler itself.
fn sanitize(build: &mut cc::Build) -> Option<PathBuf> {
    match env::var("TCH_SCOPE_SANITIZE").ok()?.as_str() {
        "address" => {}
        other => panic!("TCH_SCOPE_SANITIZE={other}: only `address` is supported"),
    }
    // clang's runtime, so clang: set here, not through CXX, which would
    // rebuild torch-sys's C++ with clang too.
    build
        .compiler("clang++")
        .flag("-fsanitize=address")
        .flag("-fno-omit-frame-pointer")
        .flag("-g");
    let compiler = build.get_compiler();
    let out = std::process::Command::new(compiler.path())
        .arg("-print-file-name=libclang_rt.asan-x86_64.so")
        .output()
        .expect("cannot run the C++ compiler");
    let lib = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        lib.is_absolute() && lib.exists(),
        "TCH_SCOPE_SANITIZE=address needs clang++ and its runtime: install \
         Debian's clang and libclang-rt-dev (`make asan` does)"
    );
    Some(lib.parent()?.to_path_buf())
}
