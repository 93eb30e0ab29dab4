//! Replays the seed corpus (`fuzz/corpus/<target>/*`) through the fuzz targets' checks
//! without the fuzzer: every input the corpus holds — seeds, and crashes fixed and kept
//! as regressions — must pass. `scripts/fuzz.sh` runs the real fuzzer.

use std::path::Path;

#[test]
fn every_corpus_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut failed = Vec::new();
    let mut ran = 0;
    for target in quicknat_fuzz::TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        files.sort();
        assert!(
            !files.is_empty(),
            "no seed for {target} in {}",
            dir.display()
        );
        for f in files {
            let data = std::fs::read(&f).expect("corpus file");
            ran += 1;
            if std::panic::catch_unwind(|| quicknat_fuzz::run(target, &data)).is_err() {
                failed.push(f.display().to_string());
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {ran} corpus inputs fail:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
