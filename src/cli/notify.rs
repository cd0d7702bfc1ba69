//! `cronlease notify test CHANNEL`: a test event sent through one channel
//! of the job table, and the receiver's answer printed.

use std::collections::BTreeMap;

use super::NotifyTestArgs;
use crate::config::{Config, EventKind};
use crate::exit::Exit;
use crate::notify::{Channels, Event, new_key};

/// `cronlease notify test`.
pub(super) fn test(args: &NotifyTestArgs) -> Exit {
    let config = match Config::load(&args.config.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::InvalidInput;
        }
    };
    let Some(spec) = config.notify.get(&args.channel) else {
        let defined: Vec<&str> = config.notify.keys().map(String::as_str).collect();
        let expected = if defined.is_empty() {
            "the file defines none: add a [notify.<name>] table".to_string()
        } else {
            format!("expected one of {}", defined.join(", "))
        };
        eprintln!(
            "error: no channel {:?} in {}: {expected}",
            args.channel,
            config.source.display()
        );
        return Exit::InvalidInput;
    };
    // Only this channel is built: another's trouble is not this test's.
    let one = BTreeMap::from([(args.channel.clone(), spec.clone())]);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Failure;
        }
    };
    let event = test_event(&config);
    let sent = runtime.block_on(async {
        let channels = Channels::build(&one).map_err(|e| e.to_string())?;
        let target = channels
            .get(&args.channel)
            .expect("the channel was built from the one spec given");
        let dashboard_url = config.daemon.notify.dashboard_url.as_deref();
        target.send(&event, dashboard_url).await.map_err(|e| {
            let retried = if e.is_permanent() {
                "permanent: the delivery would not retry it"
            } else {
                "the delivery would retry it"
            };
            format!("{e} ({retried})")
        })
    });
    match sent {
        Ok(receipt) => {
            println!(
                "{} ({}): sent test event {}; the receiver answered: {}",
                args.channel,
                spec.describe(),
                event.key,
                receipt.answer
            );
            Exit::Success
        }
        Err(message) => {
            eprintln!(
                "error: channel {} ({}): {message}",
                args.channel,
                spec.describe()
            );
            Exit::Failure
        }
    }
}

/// The event `notify test` sends: kind `test`, a fresh key, this host as
/// the replica.
fn test_event(config: &Config) -> Event {
    let replica = config.replica_id().map(str::to_string).or_else(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
    });
    Event {
        kind: EventKind::Test,
        key: new_key(),
        job: None,
        tick_ms: None,
        run_id: None,
        fence: None,
        replica,
        status: None,
        attempt: None,
        output_tail: None,
        occurred_ms: crate::clock::local_now_ms(),
        detail: None,
    }
}
