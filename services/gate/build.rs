//! Rebuilds when the embedded audit migrations change.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
