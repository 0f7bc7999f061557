//! Unit tests of the retry decisions and reply parsing.

use redis::Arg;

use super::*;
use crate::keys::KeySet;
use crate::scripts::Script;

fn server_error(text: &str) -> RedisError {
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap() {
        Value::ServerError(err) => err.into(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn redirects_name_the_node() {
    match next_step(&server_error("MOVED 3999 127.0.0.1:7001"), 0) {
        Step::Redirect(Target::Node { host, port, asking }) => {
            assert_eq!((host.as_str(), port, asking), ("127.0.0.1", 7001, false));
        }
        _ => panic!("MOVED must redirect"),
    }
    match next_step(&server_error("ASK 3999 127.0.0.1:7002"), 0) {
        Step::Redirect(Target::Node { port, asking, .. }) => {
            assert_eq!((port, asking), (7002, true));
        }
        _ => panic!("ASK must redirect with ASKING"),
    }
}

#[test]
fn reconfiguration_backs_off_and_config_errors_fail() {
    for text in [
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "LOADING Redis is loading the dataset in memory",
        "READONLY You can't write against a read only replica.",
    ] {
        assert!(
            matches!(next_step(&server_error(text), 0), Step::Backoff),
            "{text}"
        );
    }
    assert!(matches!(
        next_step(&server_error("NOSCRIPT No matching script."), 0),
        Step::Reload
    ));
    for text in [
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "CROSSSLOT Keys in request don't hash to the same slot",
        "ERR unknown command 'FOO'",
    ] {
        assert!(
            matches!(next_step(&server_error(text), 0), Step::Fail),
            "{text}"
        );
    }
    let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    assert!(
        matches!(next_step(&io, 0), Step::Fail),
        "may have run: never resent"
    );
}

#[test]
fn noscript_switches_to_eval_once() {
    let script = Script::new("t", "return 1");
    let keys = KeySet::from_keys(["{a}:1"]).unwrap();
    let mut payload = Payload::script(&script, &keys, ("x", 2));
    assert!(payload.fall_back_to_eval());
    let Payload::Script { cmd, .. } = &payload else {
        unreachable!()
    };
    let args: Vec<Vec<u8>> = cmd
        .args_iter()
        .map(|a| match a {
            Arg::Simple(b) => b.to_vec(),
            _ => panic!("no cursor in a script command"),
        })
        .collect();
    assert_eq!(
        args,
        [&b"EVAL"[..], b"return 1", b"1", b"{a}:1", b"x", b"2"]
    );
    assert!(!payload.fall_back_to_eval());
}

#[test]
fn aborted_exec_reports_the_queued_error() {
    let replies = vec![
        Value::Okay,
        redis::parse_redis_value(b"-ERR wrong number of arguments for 'incrby' command\r\n")
            .unwrap(),
        redis::parse_redis_value(b"-EXECABORT Transaction discarded\r\n").unwrap(),
    ];
    let err = exec_reply(replies, 0).unwrap_err();
    assert!(
        err.to_string().contains("wrong number of arguments"),
        "{err}"
    );
    let ok = exec_reply(vec![Value::Okay, Value::Array(vec![Value::Int(1)])], 0).unwrap();
    assert_eq!(ok, Value::Array(vec![Value::Int(1)]));
}

#[test]
fn backoff_is_short_and_capped() {
    assert_eq!(backoff(1), Duration::from_millis(10));
    assert_eq!(backoff(30), Duration::from_millis(80));
}

#[test]
fn an_undo_follows_every_outcome_but_a_value_and_a_proof_of_not_running() {
    let replied = |text: &str| Ok(Err(server_error(text)));
    for proof in [
        "MOVED 3999 127.0.0.1:7001",
        "ASK 3999 127.0.0.1:7002",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "NOSCRIPT No matching script.",
    ] {
        assert!(!may_have_run(&replied(proof)), "{proof}");
    }
    assert!(!may_have_run(&Ok(Ok(Value::Int(1)))));
    for doubt in [
        // A WAIT refused after the script ran, a script that failed midway.
        "NOPERM this user has no permissions to run the 'wait' command",
        "ERR The user executing the script can't run this command or subcommand script: x",
    ] {
        assert!(may_have_run(&replied(doubt)), "{doubt}");
    }
    assert!(may_have_run(&Err(Lost::TimedOut)));
    let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    assert!(may_have_run(&Err(Lost::Broken(reset))));
}

#[test]
fn an_evalsha_is_packed_as_redis_packs_it() {
    let script = Script::new("t", "return 1");
    let keys = KeySet::from_keys(["{a}:1", "{a}:2"]).unwrap();
    let long = vec![b'v'; 100];
    let args: Vec<Vec<u8>> = vec![b"10".to_vec(), Vec::new(), long];
    let mut theirs = redis::cmd("EVALSHA");
    theirs
        .arg(script.sha1())
        .arg(2)
        .arg("{a}:1")
        .arg("{a}:2")
        .arg(&args);
    assert_eq!(
        evalsha(&script, &keys, &args).get_packed_command(),
        theirs.get_packed_command()
    );
}
