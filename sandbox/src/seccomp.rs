//! The seccomp wall: what a contained program may not ask the kernel for, whatever paths it can
//! name. It is the whole socket wall where namespaces are not available ([`crate::isolate`]),
//! and the UDP and raw-socket half of `network: none` everywhere (Landlock's network rules cover
//! TCP ports only).
//!
//! - No Unix sockets of its own making (`socket(AF_UNIX, …)` fails with `EACCES`), so nothing
//!   outside can be connected to; `socketpair` still works, as runtimes need it.
//! - Without the network: only Unix (where allowed), netlink and the kernel's crypto sockets can
//!   be made: no TCP, UDP (so no DNS) or raw sockets of any family.
//! - Always, once any of this applies: no `io_uring`, which can make and connect sockets
//!   without the `socket` and `connect` system calls.
//!
//! The filter is built ([`program`], pure) before it is installed ([`install`]), after
//! `no_new_privs`, in the thread that then starts the program.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// What the filter refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Refusals {
    /// `socket(AF_UNIX, …)`.
    pub unix_sockets: bool,
    /// Every socket family but Unix, netlink and `AF_ALG`.
    pub network: bool,
}

impl Refusals {
    pub fn any(self) -> bool {
        self.unix_sockets || self.network
    }
}

#[derive(Debug, thiserror::Error)]
#[error("seccomp: {0}")]
pub struct SeccompError(String);

impl From<seccompiler::Error> for SeccompError {
    fn from(e: seccompiler::Error) -> Self {
        SeccompError(e.to_string())
    }
}

impl From<seccompiler::BackendError> for SeccompError {
    fn from(e: seccompiler::BackendError) -> Self {
        SeccompError(e.to_string())
    }
}

/// The families that never reach beyond the machine's kernel.
const LOCAL_FAMILIES: &[i32] = &[libc::AF_UNIX, libc::AF_NETLINK, libc::AF_ALG];

/// On x86_64, the same calls through the x32 ABI carry this bit and would miss a rule written
/// for the plain numbers.
#[cfg(target_arch = "x86_64")]
const X32: i64 = 0x4000_0000;

fn numbers(call: i64) -> Vec<i64> {
    #[cfg(target_arch = "x86_64")]
    return vec![call, call | X32];
    #[cfg(not(target_arch = "x86_64"))]
    vec![call]
}

fn family(op: SeccompCmpOp, value: i32) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        op,
        value as u32 as u64,
    )?)
}

/// The BPF program for `refusals`: matching calls fail with `EACCES`; `None` when nothing is
/// refused.
pub fn program(refusals: Refusals) -> Result<Option<BpfProgram>, SeccompError> {
    if !refusals.any() {
        return Ok(None);
    }
    let socket_rule = match (refusals.unix_sockets, refusals.network) {
        (true, false) => vec![SeccompRule::new(vec![family(
            SeccompCmpOp::Eq,
            libc::AF_UNIX,
        )?])?],
        (unix, _) => {
            // Refused unless the family is one of the allowed local ones (conditions of one
            // rule must all hold).
            let allowed = LOCAL_FAMILIES
                .iter()
                .filter(|&&f| !(unix && f == libc::AF_UNIX));
            let conditions = allowed
                .map(|&f| family(SeccompCmpOp::Ne, f))
                .collect::<Result<Vec<_>, _>>()?;
            vec![SeccompRule::new(conditions)?]
        }
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for n in numbers(libc::SYS_socket) {
        rules.insert(n, socket_rule.clone());
    }
    for call in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        for n in numbers(call) {
            rules.insert(n, Vec::new());
        }
    }
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into()?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )?;
    Ok(Some(filter.try_into()?))
}

/// Installs `program` on the calling thread (and everything it starts).
pub fn install(program: &BpfProgram) -> Result<(), SeccompError> {
    Ok(seccompiler::apply_filter(program)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::net::{UnixListener, UnixStream};

    fn in_filtered_thread<T: Send + 'static>(
        refusals: Refusals,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        std::thread::spawn(move || {
            rustix::thread::set_no_new_privs(true).unwrap();
            install(&program(refusals).unwrap().unwrap()).unwrap();
            f()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn nothing_refused_is_no_filter() {
        assert!(program(Refusals::default()).unwrap().is_none());
    }

    #[test]
    fn without_unix_sockets_nothing_outside_can_be_connected_but_socketpair_works() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let _listener = UnixListener::bind(&path).unwrap();
        let (connect, pair, tcp) = in_filtered_thread(
            Refusals {
                unix_sockets: true,
                network: false,
            },
            move || {
                (
                    UnixStream::connect(&path).map_err(|e| e.raw_os_error()),
                    UnixStream::pair().is_ok(),
                    std::net::UdpSocket::bind("127.0.0.1:0").is_ok(),
                )
            },
        );
        assert_eq!(connect.map(drop), Err(Some(libc::EACCES)));
        assert!(pair, "socketpair keeps working");
        assert!(tcp, "the network was not refused");
        // This thread was not filtered.
        assert!(UnixStream::connect(dir.path().join("s")).is_ok());
    }

    #[test]
    fn without_network_no_udp_tcp_or_raw_socket_can_be_made() {
        let (udp, udp6, tcp, unix, netlink) = in_filtered_thread(
            Refusals {
                unix_sockets: false,
                network: true,
            },
            || {
                let raw = |domain, kind| {
                    rustix::net::socket(domain, kind, None).map_err(|e| e.raw_os_error())
                };
                (
                    std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.raw_os_error()),
                    raw(
                        rustix::net::AddressFamily::INET6,
                        rustix::net::SocketType::DGRAM,
                    ),
                    std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.raw_os_error()),
                    raw(
                        rustix::net::AddressFamily::UNIX,
                        rustix::net::SocketType::STREAM,
                    ),
                    raw(
                        rustix::net::AddressFamily::NETLINK,
                        rustix::net::SocketType::RAW,
                    ),
                )
            },
        );
        assert_eq!(udp.map(drop), Err(Some(libc::EACCES)));
        assert_eq!(udp6.map(drop), Err(libc::EACCES));
        assert_eq!(tcp.map(drop), Err(Some(libc::EACCES)));
        assert!(unix.is_ok(), "Unix sockets were not refused");
        assert!(netlink.is_ok());
    }

    #[test]
    fn io_uring_is_refused_once_anything_is() {
        let setup = in_filtered_thread(
            Refusals {
                unix_sockets: true,
                network: true,
            },
            || {
                // io_uring_setup(1, NULL): the filter answers before the kernel reads the params.
                #[allow(unsafe_code)]
                // SAFETY: a raw system call with a null pointer the kernel never reaches.
                let r = unsafe {
                    libc::syscall(libc::SYS_io_uring_setup, 1, std::ptr::null_mut::<u8>())
                };
                (r, std::io::Error::last_os_error().raw_os_error())
            },
        );
        assert_eq!(setup, (-1, Some(libc::EACCES)));
    }
}
