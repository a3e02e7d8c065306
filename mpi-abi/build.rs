//! The library's SONAME: `libmpich.so.12`, what a program built by Debian's
//! `mpicc.mpich` names in its `DT_NEEDED`.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpich.so.12");
    println!("cargo:rerun-if-changed=build.rs");
}
