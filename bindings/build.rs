//! Embeds `SOURCE_DIGEST`: the SHA-256 of the sources this module is built from (the core's
//! and the bindings' Rust, and the stub the Python package declares the module by), so that
//! `ttlpolicy/_backend.py` can refuse a build of other sources found in a checkout (a stale
//! `_native` left by an earlier commit's build) instead of running it silently.
//! The file set and its encoding are `python/ttlpolicy/_source_digest.py`'s: change both.

use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// Folders whose `.rs` files count, and single files, relative to the repository root.
const DIRS: [&str; 2] = ["rust/src", "bindings/src"];
const FILES: [&str; 1] = ["python/ttlpolicy/_native.pyi"];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in DIRS {
        println!("cargo:rerun-if-changed=../{dir}");
        rs_files(&root.join(dir), &mut files);
    }
    for file in FILES {
        println!("cargo:rerun-if-changed=../{file}");
        files.push(root.join(file));
    }
    // (path relative to the root, '/'-separated) NUL content NUL, in path order
    let mut named: Vec<(String, PathBuf)> = files
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&root).ok()?.to_str()?.replace('\\', "/");
            Some((rel, p))
        })
        .collect();
    named.sort();
    let digest = if named.iter().all(|(_, p)| p.is_file()) && named.len() > FILES.len() {
        let mut h = Sha256::new();
        for (rel, path) in &named {
            h.update(rel.as_bytes());
            h.update([0]);
            h.update(fs::read(path).expect("a source file could not be read"));
            h.update([0]);
        }
        h.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    } else {
        String::from("unknown") // sources not laid out as in the repository (never compared)
    };
    println!("cargo:rustc-env=TTLPOLICY_SOURCE_DIGEST={digest}");
}
