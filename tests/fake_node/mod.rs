//! A one-node "cluster" on a loopback port that this test owns, for making a
//! *connected* cluster unreachable without touching the shared six nodes.
//!
//! It speaks just enough RESP for redis-rs to connect (`CLIENT SETINFO`,
//! `PING`, `CLUSTER SLOTS` naming itself as the owner of every slot) and
//! answers everything else with an error. Then the test can:
//!
//! * [`FakeNode::go_dark`] — keep every socket open and never answer again
//!   (a partitioned or frozen node: calls time out);
//! * [`FakeNode::shut_down`] — close every socket and stop listening (a dead
//!   node: connections drop and reconnects are refused).
//!
//! [`FakeNode::start_standalone_redirecting`] instead plays a standalone
//! server (cluster support disabled) that answers every script with a
//! `MOVED`, which a real one never does.
//!
//! [`FakeNode::start_stale_sentinel`] plays a sentinel that has not heard
//! of a failover: it names a fixed address as the primary, whatever
//! happened since.
//!
//! [`FakeNode::start_sharing`] claims only the slots below a bound and names
//! a real master as the owner of the rest: a client that learns the
//! topology from it sends some calls to the fake node and some to the real
//! cluster (where the slots not owned by that master answer `MOVED`).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct FakeNode {
    port: u16,
    password: Option<String>,
    dark: Arc<AtomicBool>,
    /// Commands read, answered or not.
    commands: Arc<AtomicUsize>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl FakeNode {
    pub async fn start() -> FakeNode {
        Self::start_with_password(None).await
    }

    /// A node that, like Redis with `requirepass`, answers `NOAUTH` until
    /// `AUTH` gives `password` and `WRONGPASS` to any other (without one,
    /// any `AUTH` is accepted).
    pub async fn start_with_password(password: Option<&str>) -> FakeNode {
        Self::start_as(password, false, None).await
    }

    /// A non-cluster node (`CLUSTER SLOTS` → cluster support disabled,
    /// `INFO` → `cluster_enabled:0`) that answers `EVALSHA`/`EVAL` with
    /// `MOVED 0 127.0.0.1:1`.
    pub async fn start_standalone_redirecting() -> FakeNode {
        Self::start_as(None, true, None).await
    }

    /// A cluster node whose `CLUSTER SLOTS` says it serves slots
    /// `0..first_elsewhere` and the master at `others` (`host:port`) serves
    /// `first_elsewhere..=16383`.
    pub async fn start_sharing(first_elsewhere: u16, others: &str) -> FakeNode {
        Self::start_as(None, false, Some((first_elsewhere, others.to_owned()))).await
    }

    /// A sentinel that answers `SENTINEL GET-MASTER-ADDR-BY-NAME` for any
    /// service with `primary` (`host:port`), and nothing else.
    pub async fn start_stale_sentinel(primary: &str) -> FakeNode {
        let (host, port) = primary.rsplit_once(':').unwrap();
        let reply = format!(
            "*2\r\n${}\r\n{host}\r\n${}\r\n{port}\r\n",
            host.len(),
            port.len()
        );
        Self::start_with(None, Plays::Sentinel(reply)).await
    }

    async fn start_as(
        password: Option<&str>,
        standalone: bool,
        shared: Option<(u16, String)>,
    ) -> FakeNode {
        let plays = if standalone {
            Plays::Standalone
        } else {
            Plays::Cluster(shared)
        };
        Self::start_with(password, plays).await
    }

    async fn start_with(password: Option<&str>, plays: Plays) -> FakeNode {
        let password = password.map(str::to_owned);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let dark = Arc::new(AtomicBool::new(false));
        let commands = Arc::new(AtomicUsize::new(0));
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let (dark, tasks, password) = (dark.clone(), tasks.clone(), password.clone());
            let commands = commands.clone();
            let (slots, standalone, sentinel) = match plays {
                Plays::Cluster(shared) => (cluster_slots(port, shared.as_ref()), false, None),
                Plays::Standalone => (cluster_slots(port, None), true, None),
                Plays::Sentinel(reply) => (cluster_slots(port, None), false, Some(reply)),
            };
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let task = tokio::spawn(serve(
                        stream,
                        slots.clone(),
                        dark.clone(),
                        commands.clone(),
                        password.clone(),
                        standalone,
                        sentinel.clone(),
                    ));
                    tasks.lock().unwrap().push(task);
                }
            }
        });
        FakeNode {
            port,
            password,
            dark,
            commands,
            tasks,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Commands read so far on every connection, answered or not.
    pub fn commands(&self) -> usize {
        self.commands.load(Ordering::SeqCst)
    }

    pub fn go_dark(&self) {
        self.dark.store(true, Ordering::SeqCst);
    }

    pub fn shut_down(&self) {
        self.accept.abort();
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// What a fake node plays.
enum Plays {
    /// A cluster node, owning every slot or those below a bound.
    Cluster(Option<(u16, String)>),
    /// A standalone server that redirects every script.
    Standalone,
    /// A sentinel, with its one `GET-MASTER-ADDR-BY-NAME` reply.
    Sentinel(String),
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// The `CLUSTER SLOTS` reply: every slot here, or the split of
/// `start_sharing`.
fn cluster_slots(port: u16, shared: Option<&(u16, String)>) -> String {
    let entry = |first: u16, last: u16, host: &str, port: &str, id: char| {
        let id = id.to_string().repeat(40);
        format!(
            "*3\r\n:{first}\r\n:{last}\r\n*3\r\n${}\r\n{host}\r\n:{port}\r\n$40\r\n{id}\r\n",
            host.len()
        )
    };
    let here = port.to_string();
    match shared {
        None => format!("*1\r\n{}", entry(0, 16383, "127.0.0.1", &here, 'f')),
        Some((first_elsewhere, others)) => {
            let (host, other_port) = others.rsplit_once(':').unwrap();
            format!(
                "*2\r\n{}{}",
                entry(0, first_elsewhere - 1, "127.0.0.1", &here, 'f'),
                entry(*first_elsewhere, 16383, host, other_port, 'e')
            )
        }
    }
}

async fn serve(
    stream: TcpStream,
    slots: String,
    dark: Arc<AtomicBool>,
    commands: Arc<AtomicUsize>,
    password: Option<String>,
    standalone: bool,
    sentinel: Option<String>,
) {
    let mut authed = password.is_none();
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    while let Some(args) = read_command(&mut read).await {
        commands.fetch_add(1, Ordering::SeqCst);
        if dark.load(Ordering::SeqCst) {
            continue; // swallow: the client waits until its timeout
        }
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let sub = args
            .get(1)
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase());
        let reply = match (name.as_str(), sub.as_deref()) {
            ("AUTH", _) => match &password {
                Some(p) if args.last().map(Vec::as_slice) != Some(p.as_bytes()) => {
                    "-WRONGPASS invalid username-password pair or user is disabled.\r\n".to_owned()
                }
                _ => {
                    authed = true;
                    "+OK\r\n".to_owned()
                }
            },
            ("CLIENT", _) => "+OK\r\n".to_owned(),
            _ if !authed => "-NOAUTH Authentication required.\r\n".to_owned(),
            ("PING", _) => "+PONG\r\n".to_owned(),
            ("SENTINEL", Some("GET-MASTER-ADDR-BY-NAME")) if sentinel.is_some() => {
                sentinel.clone().unwrap_or_default()
            }
            ("CLUSTER", _) if standalone => {
                "-ERR This instance has cluster support disabled\r\n".to_owned()
            }
            ("INFO", _) if standalone => {
                let info = "# Cluster\r\ncluster_enabled:0\r\n";
                format!("${}\r\n{info}\r\n", info.len())
            }
            ("EVALSHA" | "EVAL", _) if standalone => "-MOVED 0 127.0.0.1:1\r\n".to_owned(),
            ("CLUSTER", Some("SLOTS")) => slots.clone(),
            _ => "-ERR fake node: unsupported command\r\n".to_owned(),
        };
        if write.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads one RESP array of bulk strings; `None` at EOF or on garbage.
async fn read_command<R: AsyncBufReadExt + Unpin>(read: &mut R) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    read.read_line(&mut line).await.ok()?;
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        read.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0; len + 2];
        read.read_exact(&mut buf).await.ok()?;
        buf.truncate(len);
        args.push(buf);
    }
    Some(args)
}
