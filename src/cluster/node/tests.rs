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
