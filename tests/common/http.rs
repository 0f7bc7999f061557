//! A real axum server on a loopback port and a raw HTTP/1.1 client, for the
//! tests that check what goes over the wire byte for byte.

use std::net::SocketAddr;

use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves `app` on a loopback port the way axum apps that limit by peer
/// address must be served: with connect info.
pub async fn serve_with_connect_info(app: Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    (addr, server)
}

/// One raw HTTP/1.1 GET; the whole reply, headers and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    http_get_with(addr, path, &[]).await
}

/// One raw HTTP/1.1 GET with extra request headers; the whole reply.
pub async fn http_get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    reply
}
