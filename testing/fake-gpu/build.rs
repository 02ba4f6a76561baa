//! Gives the cdylib the soname `libcuda.so.1`, the name cudarc's loader opens.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
