//! The client side of the control sockets' handshake: [`connect_authenticated`] connects as a
//! peer and returns the stream once both sides proved the socket's key (the server side is
//! `transport.rs`'s `authenticated_incoming`; the frames are `handshake.rs`).

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::handshake::{self, SocketKey};

/// How long a client waits to connect and complete the handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A fresh handshake nonce from the operating system's random source.
pub(super) fn nonce() -> std::io::Result<[u8; handshake::KEY_BYTES]> {
    let mut n = [0u8; handshake::KEY_BYTES];
    getrandom::fill(&mut n).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(n)
}

/// Connects to the control socket at `path` as `peer`, and returns the stream once both sides
/// proved `key`. Fails with `PermissionDenied` when the server cannot prove the key (something
/// else bound the path, or the key is stale) or refuses this one.
pub async fn connect_authenticated(
    path: &Path,
    peer: &str,
    key: &SocketKey,
) -> std::io::Result<UnixStream> {
    use handshake::{ACCEPTED, KEY_BYTES, Side, encode_hello, proof, verify};
    let denied = |m: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, m);
    let mut stream = UnixStream::connect(path).await?;
    let client_nonce = nonce()?;
    stream.write_all(&encode_hello(peer, &client_nonce)).await?;
    let mut reply = [0u8; 2 * KEY_BYTES];
    stream.read_exact(&mut reply).await.map_err(|e| {
        denied(format!(
            "{} closed the handshake ({e}): it does not accept {peer:?}",
            path.display()
        ))
    })?;
    let (server_nonce, server_proof) = reply.split_at(KEY_BYTES);
    let server_nonce: [u8; KEY_BYTES] = server_nonce
        .try_into()
        .map_err(|_| denied("short handshake reply".into()))?;
    if !verify(
        key,
        Side::Server,
        peer,
        &client_nonce,
        &server_nonce,
        server_proof,
    ) {
        return Err(denied(format!(
            "{} could not prove it is the glovebox service this key is for (an impostor, or a stale key)",
            path.display()
        )));
    }
    let client_proof = proof(key, Side::Client, peer, &client_nonce, &server_nonce);
    stream.write_all(&client_proof).await?;
    let mut accepted = [0u8; 1];
    stream
        .read_exact(&mut accepted)
        .await
        .map_err(|e| denied(format!("{} refused the handshake ({e})", path.display())))?;
    if accepted[0] != ACCEPTED {
        return Err(denied(format!("{} refused the handshake", path.display())));
    }
    Ok(stream)
}
