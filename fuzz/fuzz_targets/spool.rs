//! The spool's reader on a file of any bytes: `Spool::pending` returns the
//! outcome or the reason it cannot be read (for quarantine), never panics;
//! an outcome that reads is turned into the finish script's stream fields,
//! and saved (in the spool, whatever its run id) and read back unchanged.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use cronlease::spool::{DEFAULT_MAX_BYTES, Spool};
use libfuzzer_sys::fuzz_target;

/// One spool directory for the process, emptied before each input.
fn spool() -> &'static (PathBuf, Spool) {
    static SPOOL: OnceLock<(PathBuf, Spool)> = OnceLock::new();
    SPOOL.get_or_init(|| {
        let state =
            std::env::temp_dir().join(format!("cronlease-fuzz-spool-{}", std::process::id()));
        let spool =
            Spool::open(&state, DEFAULT_MAX_BYTES).expect("a spool in the temporary directory");
        (state.join("spool"), spool)
    })
}

fuzz_target!(|bytes: &[u8]| {
    let (dir, spool) = spool();
    for entry in std::fs::read_dir(dir)
        .expect("the spool directory")
        .flatten()
    {
        let _ = std::fs::remove_file(entry.path());
    }
    std::fs::write(dir.join("run.json"), bytes).expect("a spool file");
    let pending = spool.pending().expect("the spool directory reads");
    assert_eq!(pending.len(), 1);
    let (path, read) = pending.into_iter().next().expect("one file");
    let Ok(outcome) = read else {
        return;
    };
    let _ = outcome.stream_fields();
    spool.remove(&path).expect("the file is removed");
    let saved = spool.save(&outcome).expect("the outcome is saved");
    assert_eq!(saved.parent(), Some(dir.as_path()), "{:?}", outcome.run_id);
    let again = spool.pending().expect("the spool directory reads");
    let [(again_path, Ok(again))] = &again[..] else {
        panic!("the saved outcome does not read back: {again:?}");
    };
    assert_eq!(again_path, &saved);
    assert_eq!(again, &outcome);
});
