//! Unit tests of what a socket records and of the TLS settings' checks.

use redis::IntoConnectionInfo;
use tokio::io::AsyncWriteExt;

use super::*;

fn socket(shared: &Arc<Shared>) -> Socket {
    Socket {
        shared: Arc::clone(shared),
        driver: tokio::spawn(async {}).abort_handle(),
    }
}

#[tokio::test]
async fn every_byte_the_stream_accepts_is_counted() {
    let state = Shared::new();
    let socket = socket(&state);
    // Room for 4 bytes until the far end reads.
    let (near, _far) = tokio::io::duplex(4);
    let mut counted = Counted::new(Box::pin(near), Arc::clone(&state), Holding::Never);
    assert_eq!(counted.write(b"PING\r\n").await.unwrap(), 4);
    assert_eq!(
        socket.written(),
        4,
        "what was accepted, not what was offered"
    );
    let full = tokio::time::timeout(Duration::from_millis(50), counted.write(b"\r\n")).await;
    assert!(full.is_err(), "the buffer is full");
    assert_eq!(socket.written(), 4);
}

#[tokio::test(start_paused = true)]
async fn idle_time_runs_from_the_last_use() {
    let state = Shared::new();
    let socket = socket(&state);
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(socket.idle(), Duration::from_secs(5));
    socket.touch();
    assert_eq!(socket.idle(), Duration::ZERO);
    tokio::time::advance(Duration::from_millis(1500)).await;
    assert_eq!(socket.idle(), Duration::from_millis(1500));
}

#[tokio::test(start_paused = true)]
async fn waiting_for_the_end_returns_once_the_driver_ended() {
    let state = Shared::new();
    let socket = socket(&state);
    assert!(!socket.has_ended());
    let waited = tokio::time::timeout(Duration::from_secs(1), socket.ended()).await;
    assert!(waited.is_err(), "not ended yet");
    // What the driver's task drops when the driver is done.
    drop(Ends(Arc::clone(&state)));
    assert!(socket.has_ended());
    tokio::time::timeout(Duration::from_secs(1), socket.ended())
        .await
        .expect("ended");
}

fn seeds(url: &str) -> Vec<ConnectionInfo> {
    vec![url.into_connection_info().unwrap()]
}

#[test]
fn plain_seeds_need_no_tls_settings() {
    let connector = Connector::new(&seeds("redis://127.0.0.1:7000"), None).unwrap();
    assert!(connector.tls.is_none());
}

#[test]
fn turning_certificate_checks_off_is_refused() {
    let err = Connector::new(&seeds("rediss://127.0.0.1:7000/#insecure"), None)
        .err()
        .unwrap();
    assert!(matches!(err, Error::Config { field: "tls", .. }), "{err}");
}

#[test]
fn a_ca_that_is_no_certificate_is_refused() {
    let certificates = TlsCertificates {
        client_tls: None,
        root_cert: Some(
            b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".to_vec(),
        ),
    };
    let err = Connector::new(&seeds("rediss://127.0.0.1:7000"), Some(&certificates))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Config { field: "tls", .. }), "{err}");
}
