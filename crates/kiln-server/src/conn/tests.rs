use axum::serve::{Listener, ListenerExt};
use tokio::net::{TcpListener, TcpStream};

use super::no_delay;

#[tokio::test]
async fn accepted_http_sockets_send_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = tokio::spawn(TcpStream::connect(addr));
    let mut listener = listener.tap_io(no_delay);
    let (tcp, _) = listener.accept().await;
    assert!(tcp.nodelay().unwrap(), "TCP_NODELAY set on accept");
    let client = client.await.unwrap().unwrap();
    assert!(!client.nodelay().unwrap(), "a socket's default is off");
}
