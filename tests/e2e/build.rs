//! Tells the tests where the `podpass` binary of this build is: beside this package's
//! build directory, in the profile's directory of the same target dir.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // OUT_DIR is <target>/<profile>/build/podpass-e2e-<hash>/out.
    let out = std::env::var_os("OUT_DIR").unwrap_or_default();
    let profile = std::path::Path::new(&out).ancestors().nth(3).map(std::path::Path::to_path_buf).unwrap_or_default();
    println!("cargo:rustc-env=PODPASS_BIN={}", profile.join("podpass").display());
}
