//! Builds the C shim over libibverbs, and only with the `ibverbs` feature:
//! without it nothing C is compiled and nothing is linked.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "ibverbs")]
    ibverbs::build();
}

#[cfg(feature = "ibverbs")]
mod ibverbs {
    pub fn build() {
        for f in ["csrc/shim.c", "csrc/shim.h"] {
            println!("cargo:rerun-if-changed={f}");
        }
        cc::Build::new()
            .file("csrc/shim.c")
            .warnings(true)
            .extra_warnings(true)
            .flag_if_supported("-Wno-unused-parameter")
            .compile("verbs_tm_shim");
        println!("cargo:rustc-link-lib=ibverbs");
    }
}
