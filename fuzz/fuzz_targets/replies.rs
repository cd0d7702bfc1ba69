//! Every reader of a Redis reply on the same reply: the input is RESP
//! (`*3\r\n$7\r\nclaimed\r\n…`, see `seeds/replies/`), parsed by redis-rs
//! into the value the connection would hand over, then given to the claim,
//! finish, sweep, renew, manual-run, lock, lock-holder, trigger-stream and
//! `TIME` readers. Each either reads it or says why not; none panics.

#![no_main]

use cronlease::store::fuzzing;
use libfuzzer_sys::fuzz_target;
use redis::Value;

fuzz_target!(|bytes: &[u8]| {
    let Ok(reply) = redis::parse_redis_value(bytes) else {
        return;
    };
    let _ = fuzzing::claim(reply.clone()).map(|r| r.kind());
    let _ = fuzzing::finish(reply.clone());
    let _ = fuzzing::sweep(reply.clone());
    let _ = fuzzing::manual(reply.clone());
    let _ = fuzzing::backfill_plan(reply.clone());
    let _ = fuzzing::backfill_take(reply.clone());
    let _ = fuzzing::lock(reply.clone()).map(|r| r.granted().is_some());
    let _ = fuzzing::lock_holder("report", reply.clone());
    let _ = fuzzing::time(reply.clone());
    for request in fuzzing::trigger_read(reply.clone()) {
        let _ = request.requested_ms();
    }
    if let Ok(requests) = fuzzing::trigger_auto_claim(reply.clone()) {
        for request in requests {
            let _ = request.requested_ms();
        }
    }
    if let Some(request) = fuzzing::trigger_entry(reply.clone()) {
        let _ = request.requested_ms();
    }
    if let Value::Array(items) = &reply {
        let _ = fuzzing::renewals(items);
    }
});
