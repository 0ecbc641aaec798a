//! Tells the binary which aisimulate-core release it is built on: the version Cargo.lock pins
//! (dynosim builds with `--locked`, the lock of the release asked for in place of Cargo.lock).

use std::path::Path;

fn main() {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock)
        .unwrap_or_else(|e| panic!("{}: cannot read the lock file: {e}", lock.display()));
    let version = text
        .split("[[package]]")
        .find_map(|package| {
            let mut lines = package.lines().map(str::trim);
            lines.find(|l| *l == r#"name = "aisimulate-core""#)?;
            let line = lines.next()?;
            Some(
                line.strip_prefix(r#"version = ""#)?
                    .strip_suffix('"')?
                    .to_owned(),
            )
        })
        .unwrap_or_else(|| panic!("{}: pins no aisimulate-core", lock.display()));
    println!("cargo:rustc-env=AISIMULATE_CORE_VERSION={version}");
}
