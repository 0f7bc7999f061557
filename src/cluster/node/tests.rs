//! Unit tests of a node's failure detection, probes and backoff.

use super::*;

fn config() -> NodeConfig {
    NodeConfig {
        connector: Connector::default(),
        connect_timeout: Duration::from_millis(300),
        max_idle: Duration::from_secs(60),
        down_after: 3,
        failure_window: Duration::from_secs(60),
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_millis(400),
    }
}

fn refused_node() -> Arc<Node> {
    // Nothing listens on port 1: every connection attempt is refused.
    let info = redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1:1").unwrap();
    Arc::new(Node::new("127.0.0.1:1".into(), info, config()))
}

#[tokio::test]
async fn a_refused_connect_marks_the_node_down_and_later_calls_fail_fast() {
    let node = refused_node();
    assert!(matches!(
        node.connection(Lane::Shared).await,
        Err(Unavailable::Connect(_))
    ));
    assert!(node.is_down());
    let started = Instant::now();
    for _ in 0..100 {
        assert!(matches!(
            node.connection(Lane::Shared).await,
            Err(Unavailable::Down { .. })
        ));
    }
    assert!(started.elapsed() < Duration::from_millis(50));
    let state = node.state();
    assert_eq!(state.marked_down, 1);
    assert!(state.down_for.is_some());
}

#[tokio::test]
async fn probes_back_off_with_growth_up_to_the_cap() {
    let node = refused_node();
    let _ = node.connection(Lane::Shared).await;
    let started = Instant::now();
    // Call constantly for 1.5 s: probes start only when due.
    while started.elapsed() < Duration::from_millis(1500) {
        let _ = node.connection(Lane::Shared).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let attempts = node.state().connect_failures;
    // First attempt, then probes after 50-100, 100-200, 200-400 and
    // every 200-400 ms: at most 1 + 8 in 1.5 s, at least 1 + 3.
    assert!((4..=9).contains(&attempts), "{attempts} connect attempts");
}

#[tokio::test]
async fn a_down_node_is_probed_without_callers() {
    let node = refused_node();
    let _ = node.connection(Lane::Shared).await;
    // No call from here on: the node probes itself, as often as above.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let attempts = node.state().connect_failures;
    assert!((4..=9).contains(&attempts), "{attempts} connect attempts");
    assert!(node.is_down());
}

#[test]
fn timeouts_mark_down_only_after_the_threshold() {
    let node = refused_node();
    assert!(!node.count_timeout());
    assert!(!node.count_timeout());
    assert!(node.count_timeout(), "the third timeout in the window");
}

#[test]
fn jitter_stays_within_half_to_all() {
    for _ in 0..1000 {
        let j = jittered(Duration::from_millis(100));
        assert!(j >= Duration::from_millis(50) && j <= Duration::from_millis(100));
    }
}

/// Puts the running task at the back of the scheduler's queue, behind
/// every task runnable now (`yield_now` defers it past them and the I/O
/// driver instead).
async fn requeue() {
    let mut queued = false;
    std::future::poll_fn(|cx| {
        if queued {
            return std::task::Poll::Ready(());
        }
        queued = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// Callers waiting while a connection attempt is under way learn its end
/// together. The scheduler's queue is kept long, as a loaded service's is,
/// and a ticker counts its passes: before, each waiter took the attempt's
/// fair lock in turn, so the last of 40 was refused about 40 passes after
/// the first (in a loaded service, 50 ms after the node was marked down:
/// the fault suite's `a_dead_master_does_not_slow_the_healthy_ones`).
#[tokio::test(flavor = "current_thread")]
async fn a_node_going_down_refuses_every_waiting_caller_at_once() {
    // A server that takes the first connection and answers nothing, so
    // the attempt stays under way until the test closes it; nothing
    // listens after that.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let info = redis::IntoConnectionInfo::into_connection_info(format!("redis://{addr}")).unwrap();
    let node = Arc::new(Node::new(addr.to_string(), info, config()));
    let opener = tokio::spawn({
        let node = Arc::clone(&node);
        async move { node.connection(Lane::Shared).await.map(drop) }
    });
    let (server_side, _) = listener.accept().await.unwrap();
    drop(listener);

    let passes = Arc::new(AtomicU64::new(0));
    let mut busy: Vec<_> = (0..50)
        .map(|_| {
            tokio::spawn(async {
                loop {
                    requeue().await;
                }
            })
        })
        .collect();
    busy.push(tokio::spawn({
        let passes = Arc::clone(&passes);
        async move {
            loop {
                passes.fetch_add(1, Ordering::Relaxed);
                requeue().await;
            }
        }
    }));
    let waiters: Vec<_> = (0..40)
        .map(|_| {
            let (node, passes) = (Arc::clone(&node), Arc::clone(&passes));
            tokio::spawn(async move {
                let refused = matches!(
                    node.connection(Lane::Shared).await,
                    Err(Unavailable::Down { .. })
                );
                (refused, passes.load(Ordering::Relaxed))
            })
        })
        .collect();
    // Every waiter reaches the wait.
    for _ in 0..3 {
        requeue().await;
    }
    assert!(!node.is_down());
    drop(server_side);

    assert!(opener.await.unwrap().is_err(), "the attempt failed");
    assert!(node.is_down());
    let mut refused_at = Vec::new();
    for waiter in waiters {
        let (refused, pass) = waiter.await.unwrap();
        assert!(refused, "a waiter was not refused");
        refused_at.push(pass);
    }
    for task in busy {
        task.abort();
    }
    let spread = refused_at.iter().max().unwrap() - refused_at.iter().min().unwrap();
    assert!(
        spread <= 2,
        "the 40 waiters were refused over {spread} passes of the scheduler"
    );
}
