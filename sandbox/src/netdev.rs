//! The one network device a `network: loopback` program has: its namespace's own `lo`, brought up
//! (a new network namespace starts with it down).

use rustix::fd::AsRawFd;

/// Brings `lo` up in the caller's network namespace (needs `CAP_NET_ADMIN` there: the caller
/// made the namespace inside its own user namespace).
pub fn loopback_up() -> std::io::Result<()> {
    let socket = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )?;
    // SAFETY: `ifreq` is plain data; zeroed it is a valid request for the interface named in
    // `ifr_name`, which is NUL-terminated. The two ioctls read and write only that struct, which
    // outlives them, on a socket this function owns.
    #[allow(unsafe_code)]
    unsafe {
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
