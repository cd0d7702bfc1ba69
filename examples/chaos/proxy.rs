//! The fault proxy: one per replica, between it and Redis, on the suite's
//! tokio runtime. It passes bytes, delays them, holds them (a blackhole),
//! drops connections, or resets them, as a fault sets it.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// What a proxy does with the bytes between one replica and Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    /// Closes existing connections and every new one at once.
    Drop,
    /// Delays every chunk, both directions, by this many ms.
    Delay(u64),
    /// Accepts but forwards nothing: connections hang until the mode
    /// changes (then what was held flows on, as after a healed partition).
    Blackhole,
}

#[derive(Clone, Copy, Debug)]
struct Control {
    mode: Mode,
    /// Bumped to reset (RST) every connection opened before.
    resets: u64,
}

/// One replica's proxy to Redis: a listener on `127.0.0.1:port` and a task
/// per connection, all on the suite's tokio runtime.
pub struct Proxy {
    pub port: u16,
    control: watch::Sender<Control>,
}

impl Proxy {
    pub fn start(runtime: &tokio::runtime::Runtime, upstream: SocketAddr) -> Result<Proxy> {
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .context("cannot bind a proxy port")?;
        let port = listener.local_addr()?.port();
        let (control, watcher) = watch::channel(Control {
            mode: Mode::Pass,
            resets: 0,
        });
        runtime.spawn(accept_loop(listener, upstream, watcher));
        Ok(Proxy { port, control })
    }

    pub fn set(&self, mode: Mode) {
        self.control.send_modify(|c| c.mode = mode);
    }

    /// RST every existing connection, then pass.
    pub fn reset(&self) {
        self.control.send_modify(|c| {
            c.resets += 1;
            c.mode = Mode::Pass;
        });
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    control: watch::Receiver<Control>,
) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                if control.borrow().mode == Mode::Drop {
                    drop(client);
                    continue;
                }
                tokio::spawn(serve(client, upstream, control.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    Closed,
    Dropped,
    Reset,
}

async fn serve(client: TcpStream, upstream: SocketAddr, mut control: watch::Receiver<Control>) {
    let born = control.borrow().resets;
    // A connection accepted while blackholed is held, not forwarded.
    loop {
        let now = *control.borrow_and_update();
        if now.resets != born {
            let _ = client.set_zero_linger();
            return;
        }
        match now.mode {
            Mode::Drop => return,
            Mode::Blackhole => {
                if control.changed().await.is_err() {
                    return;
                }
            }
            Mode::Pass | Mode::Delay(_) => break,
        }
    }
    // Redis down: the client sees its connection closed.
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let mut client = client;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let ending = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        tokio::select! {
            () = pump(client_read, server_write, control.clone()) => Ending::Closed,
            () = pump(server_read, client_write, control.clone()) => Ending::Closed,
            ending = cut(control.clone(), born) => ending,
        }
    };
    if ending == Ending::Reset {
        // Closing with a zero linger sends RST instead of FIN.
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
}

/// Ends when the connection must be dropped or reset.
async fn cut(mut control: watch::Receiver<Control>, born: u64) -> Ending {
    loop {
        let now = *control.borrow_and_update();
        if now.resets != born {
            return Ending::Reset;
        }
        if now.mode == Mode::Drop {
            return Ending::Dropped;
        }
        if control.changed().await.is_err() {
            return Ending::Dropped;
        }
    }
}

/// Waits while blackholed; false when the connection must end.
async fn wait_open(control: &mut watch::Receiver<Control>) -> bool {
    loop {
        match control.borrow_and_update().mode {
            Mode::Pass | Mode::Delay(_) => return true,
            Mode::Drop => return false,
            Mode::Blackhole => {}
        }
        if control.changed().await.is_err() {
            return false;
        }
    }
}

/// Copies one direction: each chunk is stamped when read and written at
/// its stamp plus the delay then in force, in order.
async fn pump<R, W>(mut from: R, mut to: W, control: watch::Receiver<Control>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let mut read_control = control.clone();
    let reading = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if !wait_open(&mut read_control).await {
                break;
            }
            let delay = match read_control.borrow().mode {
                Mode::Delay(ms) => Duration::from_millis(ms),
                _ => Duration::ZERO,
            };
            let due = tokio::time::Instant::now() + delay;
            if tx.send((due, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let mut write_control = control;
    let writing = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if !wait_open(&mut write_control).await {
                break;
            }
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}
