fn main() {
    if let Ok(lib) = std::env::var("DEP_TCH_SCOPE_LIBTORCH_LIB") {
        println!("cargo::rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
