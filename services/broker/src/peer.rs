//! Which local user is on the other end of a TCP connection, asked of the kernel. TCP has no
//! `SO_PEERCRED`, but the broker serves loopback only, so the client's socket is on this machine
//! too, and the kernel knows its owner: one `sock_diag` request (`NETLINK_SOCK_DIAG`, the
//! interface `ss` uses) names the client's socket by its four-tuple and the answer carries its
//! uid. That is an exact lookup, unlike reading all of `/proc/net/tcp` per connection.
//!
//! The uid is the owner of the socket the client connected with (the user that created it); a
//! socket handed to another process keeps its creator's uid. A lookup that fails (the client
//! already gone, a kernel without `sock_diag`) gives `None`, and the connection counts as an
//! unknown peer. [`request`] and [`parse_reply`] are the pure encoding, tested apart from the
//! socket.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::netlink;

/// `SOCK_DIAG_BY_FAMILY`: the sock_diag request and reply type.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST`: a request (one socket, no dump).
const NLM_F_REQUEST: u16 = 1;
/// `NLMSG_ERROR`: the kernel's error reply.
const NLMSG_ERROR: u16 = 2;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
/// Size of `struct nlmsghdr`.
const NLMSG_HEADER: usize = 16;
/// Size of `struct inet_diag_req_v2`.
const REQUEST_BODY: usize = 56;
/// Where the socket's uid sits in a reply: the header, then `inet_diag_msg`'s family, state,
/// timer and retransmits (4), its socket id (48), expires, rqueue and wqueue (12).
const UID_OFFSET: usize = NLMSG_HEADER + 4 + 48 + 12;
/// Longest the broker waits for the kernel's answer.
const LOOKUP_TIMEOUT: Duration = Duration::from_millis(100);
/// Largest reply read.
const REPLY_BYTES: usize = 512;

/// A `sock_diag` request for the TCP socket whose local address is `client` and whose remote
/// address is `server` (the client's end of a connection to the broker), numbered `seq`.
pub fn request(client: SocketAddr, server: SocketAddr, seq: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(NLMSG_HEADER + REQUEST_BODY);
    out.extend_from_slice(&((NLMSG_HEADER + REQUEST_BODY) as u32).to_ne_bytes());
    out.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    out.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    let family = if client.is_ipv4() { AF_INET } else { AF_INET6 };
    out.extend_from_slice(&[family, IPPROTO_TCP, 0, 0]);
    out.extend_from_slice(&u32::MAX.to_ne_bytes()); // every TCP state
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&server.port().to_be_bytes());
    out.extend_from_slice(&address(client.ip()));
    out.extend_from_slice(&address(server.ip()));
    out.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    out.extend_from_slice(&u32::MAX.to_ne_bytes()); // no cookie
    out.extend_from_slice(&u32::MAX.to_ne_bytes());
    out
}

/// An address as `inet_diag_sockid` holds it: 16 bytes, an IPv4 address in the first four.
fn address(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut out = [0u8; 16];
            out[..4].copy_from_slice(&v4.octets());
            out
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// What a reply says: `Some(uid)` for the answer to request `seq`, `None` for an error, another
/// request's answer or anything too short.
pub fn parse_reply(reply: &[u8], seq: u32) -> Option<u32> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(reply.get(at..at + 4)?.try_into().ok()?))
    };
    let kind = u16::from_ne_bytes(reply.get(4..6)?.try_into().ok()?);
    if kind == NLMSG_ERROR || kind != SOCK_DIAG_BY_FAMILY || u32_at(8)? != seq {
        return None;
    }
    u32_at(UID_OFFSET)
}

/// A netlink socket kept open for lookups (one descriptor for the broker's lifetime).
#[derive(Debug)]
pub struct PeerLookup {
    socket: Option<OwnedFd>,
    seq: u32,
}

impl PeerLookup {
    /// Opens the socket; without it every peer is unknown (and the broker says so once).
    pub fn open() -> PeerLookup {
        let socket = rustix::net::socket_with(
            rustix::net::AddressFamily::NETLINK,
            rustix::net::SocketType::DGRAM,
            rustix::net::SocketFlags::CLOEXEC,
            Some(netlink::SOCK_DIAG),
        )
        .and_then(|fd| {
            rustix::net::sockopt::set_socket_timeout(
                &fd,
                rustix::net::sockopt::Timeout::Recv,
                Some(LOOKUP_TIMEOUT),
            )?;
            Ok(fd)
        });
        match socket {
            Ok(fd) => PeerLookup {
                socket: Some(fd),
                seq: 0,
            },
            Err(e) => {
                tracing::warn!(error = %e, "no sock_diag: connections are not told apart by local user before they authenticate");
                PeerLookup {
                    socket: None,
                    seq: 0,
                }
            }
        }
    }

    /// The uid owning the client socket of the connection `client` → `server`.
    pub fn uid_of(&mut self, client: SocketAddr, server: SocketAddr) -> Option<u32> {
        let socket = self.socket.as_ref()?;
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let kernel = netlink::SocketAddrNetlink::new(0, 0);
        rustix::net::sendto(
            socket,
            &request(client, server, seq),
            rustix::net::SendFlags::empty(),
            &kernel,
        )
        .ok()?;
        let mut reply = [0u8; REPLY_BYTES];
        // Answers to earlier lookups that timed out may still be queued: skip them.
        loop {
            let (n, _) =
                rustix::net::recv(socket, &mut reply, rustix::net::RecvFlags::empty()).ok()?;
            let reply = reply.get(..n)?;
            if reply.get(8..12) == Some(&seq.to_ne_bytes()[..]) {
                return parse_reply(reply, seq);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_the_client_socket_by_its_four_tuple() {
        let client: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let server: SocketAddr = "127.0.0.2:7420".parse().unwrap();
        let r = request(client, server, 7);
        assert_eq!(r.len(), 72);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 72);
        assert_eq!(u16::from_ne_bytes(r[4..6].try_into().unwrap()), 20);
        assert_eq!(u32::from_ne_bytes(r[8..12].try_into().unwrap()), 7);
        assert_eq!(&r[16..18], &[AF_INET, IPPROTO_TCP]);
        assert_eq!(&r[24..26], &40000u16.to_be_bytes());
        assert_eq!(&r[26..28], &7420u16.to_be_bytes());
        assert_eq!(&r[28..32], &[127, 0, 0, 1]);
        assert_eq!(&r[44..48], &[127, 0, 0, 2]);
        let v6 = request("[::1]:1".parse().unwrap(), "[::1]:2".parse().unwrap(), 1);
        assert_eq!(v6[16], AF_INET6);
        assert_eq!(v6[28 + 15], 1);
    }

    #[test]
    fn a_reply_gives_the_uid_of_its_own_request_only() {
        let mut reply = vec![0u8; UID_OFFSET + 8];
        reply[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        reply[8..12].copy_from_slice(&9u32.to_ne_bytes());
        reply[UID_OFFSET..UID_OFFSET + 4].copy_from_slice(&1000u32.to_ne_bytes());
        assert_eq!(parse_reply(&reply, 9), Some(1000));
        assert_eq!(parse_reply(&reply, 8), None, "another request's answer");
        assert_eq!(parse_reply(&reply[..UID_OFFSET], 9), None, "too short");
        reply[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert_eq!(parse_reply(&reply, 9), None, "an error");
        assert_eq!(parse_reply(&[], 9), None);
    }

    #[test]
    fn the_kernel_names_the_owner_of_a_loopback_client() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(server).unwrap();
        let (_accepted, from) = listener.accept().unwrap();
        assert_eq!(from, client.local_addr().unwrap());
        let mut lookup = PeerLookup::open();
        let me = rustix::process::getuid().as_raw();
        assert_eq!(lookup.uid_of(from, server), Some(me));
        // A connection that does not exist has no owner.
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(lookup.uid_of(gone, server), None);
        // The lookup goes on working after a miss.
        assert_eq!(lookup.uid_of(from, server), Some(me));
    }
}
