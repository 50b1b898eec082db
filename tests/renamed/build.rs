// Finds libtorch at run time through an rpath (no LD_LIBRARY_PATH): the lib
// dir comes from tch-scope's `links` metadata. The linkage test also reads
// it, to know whether this libtorch has CUDA.
fn main() {
    if let Ok(lib) = std::env::var("DEP_TCH_SCOPE_LIBTORCH_LIB") {
        println!("cargo::rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo::rustc-env=TCH_SCOPE_LIBTORCH_LIB={lib}");
    }
}
