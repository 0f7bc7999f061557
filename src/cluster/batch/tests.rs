//! Unit tests of the grouping and of how a pipelined reply is judged.

use redis::{ErrorKind, ServerErrorKind};

use super::*;

fn reply(resp: &str) -> Value {
    redis::parse_redis_value(resp.as_bytes()).unwrap()
}

#[test]
fn a_value_or_a_script_error_is_the_calls_result() {
    assert!(matches!(
        judge(reply(":7\r\n"), false),
        Verdict::Done(Ok(Value::Int(7)))
    ));
    for text in [
        "ERR user_script:1: boom",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "CROSSSLOT Keys in request don't hash to the same slot",
    ] {
        assert!(
            matches!(
                judge(reply(&format!("-{text}\r\n")), false),
                Verdict::Done(Err(_))
            ),
            "{text}"
        );
    }
}

#[test]
fn noscript_reloads_once_then_takes_the_single_path() {
    let noscript = "-NOSCRIPT No matching script. Please use EVAL.\r\n";
    assert!(matches!(judge(reply(noscript), false), Verdict::Reload));
    match judge(reply(noscript), true) {
        Verdict::Resend(err) => {
            assert_eq!(err.kind(), ErrorKind::Server(ServerErrorKind::NoScript));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn replies_proving_the_call_did_not_run_are_resent_with_the_reply() {
    for text in [
        "MOVED 3999 127.0.0.1:7001",
        "ASK 3999 127.0.0.1:7002",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "LOADING Redis is loading the dataset in memory",
        "READONLY You can't write against a read only replica.",
    ] {
        match judge(reply(&format!("-{text}\r\n")), false) {
            // The single-call path decides from this reply where to go.
            Verdict::Resend(err) => assert!(matches!(err.kind(), ErrorKind::Server(_)), "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn calls_are_grouped_by_owner_in_input_order() {
    // Three "masters" by slot range; slots 9000.. have no owner.
    let owner = |slot: &u16| match *slot {
        0..=99 => Some("a"),
        100..=199 => Some("b"),
        200..=299 => Some("c"),
        _ => None,
    };
    let slots = [150, 5, 250, 9000, 6, 199, 0, 251];
    let (groups, unowned) = by_owner(slots, owner, |node| *node);
    assert_eq!(
        groups,
        [
            ("b", vec![150, 199]),
            ("a", vec![5, 6, 0]),
            ("c", vec![250, 251])
        ]
    );
    assert_eq!(unowned, [9000]);
    let (groups, unowned) = by_owner(Vec::<u16>::new(), owner, |node| *node);
    assert!(groups.is_empty() && unowned.is_empty());
}

#[test]
fn a_pipelines_error_is_given_to_each_call_with_its_slot() {
    let down = Error::NodeDown {
        op: "hits".into(),
        slot: None,
        node: "127.0.0.1:7000".into(),
        down_for: Duration::from_secs(1),
    };
    let err = for_slot(&down, 42);
    assert!(
        matches!(err, Error::NodeDown { slot: Some(42), .. }),
        "{err}"
    );
    assert!(err.is_transient());
    let timeout = Error::Timeout {
        op: "hits".into(),
        slot: None,
        timeout: Duration::from_millis(250),
    };
    let err = for_slot(&timeout, 7);
    assert_eq!(err.to_string(), "hits on slot 7 timed out after 250ms");
    let broken = Error::Redis {
        op: "hits".into(),
        slot: None,
        source: std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
    };
    let err = for_slot(&broken, 9);
    assert!(err.is_transient(), "may have run: transient, never resent");
    assert_eq!(err.slot(), Some(9));
}
