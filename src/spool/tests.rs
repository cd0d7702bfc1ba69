use super::*;
use crate::outcome::{Status, Trigger};

fn outcome() -> Outcome {
    Outcome {
        job: "j".into(),
        tick_ms: 1,
        fence: 2,
        run_id: "run-1".into(),
        replica: "r".into(),
        host: "h".into(),
        started_ms: 1,
        finished_ms: 2,
        status: Status::Ok,
        exit_code: Some(0),
        signal: None,
        attempts: 1,
        output: "out\n".into(),
        trigger: Trigger::Schedule,
        lease_key: "k".into(),
        cpu_ms: None,
        peak_memory_kb: None,
        oom_kills: None,
        upstream: None,
        params: Default::default(),
    }
}

#[test]
fn save_pending_remove() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    let outcome = outcome();
    let path = spool.save(&outcome).unwrap();
    spool.save(&outcome).unwrap();
    let pending = spool.pending().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].1.as_ref().unwrap(), &outcome);
    spool.remove(&path).unwrap();
    spool.remove(&path).unwrap();
    assert!(spool.pending().unwrap().is_empty());
}

#[test]
fn a_run_id_names_a_file_in_the_spool_whatever_it_holds() {
    // Found writing the `spool` fuzz target: a run id is a file name.
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    let in_spool = dir.path().join("spool");
    let mut saved = Vec::new();
    for run_id in [
        "0b4c4c52-8f8e-4b8e-9a53-2f6c1d7e0a11",
        "../../escaped",
        "/tmp/absolute",
        "..",
        ".hidden",
        "a/b",
        "a%2Fb",
        "",
        "\u{e9}t\u{e9}",
        "\u{1d53d}".repeat(100).as_str(),
        "x".repeat(300).as_str(),
        format!("{}y", "x".repeat(299)).as_str(),
    ] {
        let outcome = Outcome {
            run_id: run_id.to_string(),
            ..outcome()
        };
        let path = spool.save(&outcome).unwrap();
        assert_eq!(
            path.parent(),
            Some(in_spool.as_path()),
            "{run_id:?}: {path:?}"
        );
        saved.push(path);
    }
    assert_eq!(
        saved[0],
        in_spool.join("0b4c4c52-8f8e-4b8e-9a53-2f6c1d7e0a11.json")
    );
    let pending = spool.pending().unwrap();
    assert_eq!(pending.len(), saved.len(), "one file per run id");
    assert!(pending.iter().all(|(_, read)| read.is_ok()));
    assert!(!dir.path().join("escaped.json").exists());
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_spool_is_0700_and_its_files_0600_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: umask only sets the process's mask; the old one is put back.
    let old = unsafe { nix::libc::umask(0) };
    let opened = Spool::open(dir.path(), DEFAULT_MAX_BYTES);
    let saved = opened.as_ref().map(|spool| spool.save(&outcome()));
    // SAFETY: as above.
    unsafe { nix::libc::umask(old) };
    let path = saved.unwrap().unwrap();
    assert_eq!(mode(&dir.path().join("spool")), 0o700);
    assert_eq!(mode(&path), 0o600);
}

#[test]
fn a_spool_open_to_others_is_tightened_with_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    fs::create_dir(&spool_dir).unwrap();
    fs::set_permissions(&spool_dir, fs::Permissions::from_mode(0o777)).unwrap();
    let file = spool_dir.join("old.json");
    fs::write(&file, serde_json::to_vec(&outcome()).unwrap()).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    assert_eq!(mode(&spool_dir), 0o700);
    assert_eq!(mode(&file), 0o600);
    assert_eq!(spool.len(), 1);
}

#[test]
fn a_spool_that_is_a_symbolic_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("spool")).unwrap();
    let e = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap_err();
    assert!(
        e.to_string().contains("a symbolic link, not followed"),
        "{e}"
    );
}

#[test]
fn a_symbolic_link_in_the_spool_is_not_followed_but_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("precious.json");
    let bytes = serde_json::to_vec(&outcome()).unwrap();
    fs::write(&target, &bytes).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    let spool_dir = dir.path().join("spool");
    fs::create_dir(&spool_dir).unwrap();
    let link = spool_dir.join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    let pending = spool.pending().unwrap();
    assert_eq!(pending.len(), 1);
    let e = pending[0].1.as_ref().unwrap_err();
    assert!(
        e.to_string()
            .contains("link.json: a symbolic link, not followed"),
        "{e}"
    );
    let to = spool.quarantine(&link).unwrap();
    assert!(fs::symlink_metadata(&to).unwrap().file_type().is_symlink());
    assert_eq!(fs::read(&target).unwrap(), bytes, "the target is unchanged");
    assert_eq!(mode(&target), 0o644, "the target's mode is unchanged");
    assert!(spool.is_empty());
}

#[test]
fn a_fifo_or_a_directory_in_the_spool_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    let fifo = spool.dir().join("fifo.json");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path, which outlives the call.
    assert_eq!(unsafe { nix::libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    fs::create_dir(spool.dir().join("dir.json")).unwrap();
    let pending = spool.pending().unwrap();
    assert_eq!(pending.len(), 2);
    for (path, read) in &pending {
        let e = read.as_ref().unwrap_err();
        assert!(
            e.to_string().contains("not a regular file"),
            "{path:?}: {e}"
        );
    }
}

#[test]
fn the_cap_refuses_an_outcome_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let one = serde_json::to_vec(&outcome()).unwrap().len() as u64;
    let spool = Spool::open(dir.path(), one * 2).unwrap();
    spool.save(&outcome()).unwrap();
    spool
        .save(&Outcome {
            run_id: "run-2".into(),
            ..outcome()
        })
        .unwrap();
    assert_eq!((spool.len(), spool.bytes()), (2, one * 2));
    let refused = spool.save(&Outcome {
        run_id: "run-3".into(),
        ..outcome()
    });
    let Err(SaveError::Full {
        held,
        needed,
        max_bytes,
    }) = refused
    else {
        panic!("not refused: {refused:?}");
    };
    assert_eq!((held, needed, max_bytes), (one * 2, one, one * 2));
    assert_eq!(names(spool.dir()), ["run-1.json", "run-2.json"]);
    // Delivery makes room.
    spool.remove(&spool.dir().join("run-1.json")).unwrap();
    spool
        .save(&Outcome {
            run_id: "run-3".into(),
            ..outcome()
        })
        .unwrap();
    assert_eq!((spool.len(), spool.bytes()), (2, one * 2));
}

#[test]
fn the_count_follows_saves_and_the_directory_at_each_listing() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    for i in 0..3 {
        spool
            .save(&Outcome {
                run_id: format!("run-{i}"),
                ..outcome()
            })
            .unwrap();
    }
    assert_eq!(spool.len(), 3);
    // Removed behind the spool's back: counted again by a listing.
    fs::remove_file(spool.dir().join("run-0.json")).unwrap();
    assert_eq!(spool.listing().unwrap().len(), 2);
    assert_eq!(spool.len(), 2);
    // And by another spool opened on the same directory.
    let again = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    assert_eq!((again.len(), again.bytes()), (2, spool.bytes()));
}

#[test]
fn a_failed_write_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    // The rename fails: a directory holds the outcome's name.
    fs::create_dir(spool.dir().join("run-1.json")).unwrap();
    fs::write(spool.dir().join("run-1.json").join("x"), b"x").unwrap();
    let e = spool.save(&outcome()).unwrap_err();
    assert!(matches!(e, SaveError::Write(_)), "{e}");
    assert_eq!(names(spool.dir()), ["run-1.json"]);
    assert_eq!(spool.bytes(), 0, "nothing counted: {e}");
}

#[test]
fn temporary_files_of_a_crash_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    fs::create_dir(&spool_dir).unwrap();
    fs::write(spool_dir.join(".run-1.json.7.tmp"), b"{\"job").unwrap();
    fs::write(spool_dir.join(".run-1.json.tmp"), b"{\"job").unwrap();
    let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
    assert!(names(spool.dir()).is_empty());
}
