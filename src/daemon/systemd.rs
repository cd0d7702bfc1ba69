//! What the replica tells systemd (`Type=notify`, `WatchdogSec=`): ready,
//! reloading, stopping, alive, and a one-line status. A no-op outside
//! systemd, and when the crate is built without the `systemd` feature (an
//! embedded scheduler).

use std::time::Duration;

/// One thing to tell systemd.
#[derive(Debug, Clone, Copy)]
pub(super) enum Notice<'a> {
    Ready,
    Reloading,
    Stopping,
    /// The supervisor loop is alive (`WATCHDOG=1`).
    Alive,
    Status(&'a str),
}

/// Sends `notices` in one message.
#[cfg(feature = "systemd")]
pub(super) fn notify(notices: &[Notice<'_>]) {
    use sd_notify::NotifyState;
    let mut states = Vec::with_capacity(notices.len() + 1);
    for notice in notices {
        match notice {
            Notice::Ready => states.push(NotifyState::Ready),
            Notice::Reloading => {
                states.push(NotifyState::Reloading);
                // systemd wants the monotonic time of the reload with it.
                if let Ok(now) = NotifyState::monotonic_usec_now() {
                    states.push(now);
                }
            }
            Notice::Stopping => states.push(NotifyState::Stopping),
            Notice::Alive => states.push(NotifyState::Watchdog),
            Notice::Status(text) => states.push(NotifyState::Status(text)),
        }
    }
    let _ = sd_notify::notify(&states);
}

/// Without the `systemd` feature there is nobody to tell.
#[cfg(not(feature = "systemd"))]
pub(super) fn notify(notices: &[Notice<'_>]) {
    // The status line is built all the same; it has nowhere to go.
    for notice in notices {
        if let Notice::Status(text) = notice {
            tracing::trace!(status = %text, "no systemd to notify");
        }
    }
}

/// How often systemd wants `WATCHDOG=1` (half its `WatchdogSec=`), if it
/// does.
#[cfg(feature = "systemd")]
pub(super) fn watchdog_period() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|usec| usec / 2)
}

#[cfg(not(feature = "systemd"))]
pub(super) fn watchdog_period() -> Option<Duration> {
    None
}
