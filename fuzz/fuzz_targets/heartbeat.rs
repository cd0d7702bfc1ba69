//! A replica's heartbeat record as another replica reads it from
//! `<prefix>:replicas` (any bytes: another writer, a partial restore): it
//! parses or is refused, and one that parses is judged alive or dead at any
//! Redis time without panicking, and written back unchanged.

#![no_main]

use cronlease::membership::Heartbeat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let Ok(record) = Heartbeat::parse(&text) else {
        return;
    };
    let _ = record.dead_after_ms();
    for now_ms in [
        0,
        1_767_225_600_000,
        i64::MAX,
        i64::MIN,
        record.last_seen_ms,
    ] {
        let _ = record.silent_for_ms(now_ms);
        let _ = record.is_alive(now_ms);
    }
    let again = Heartbeat::parse(&record.to_json()).expect("a record written reads back");
    assert_eq!(again, record);
});
