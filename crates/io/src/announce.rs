//! The announcement device: a non-persistent TUN interface whose routes tell a routing
//! daemon (BIRD's `kernel` protocol with `learn`) which prefixes this gateway serves.
//!
//! The device lives exactly as long as the file descriptor [`AnnounceDevice`] holds: when
//! the process exits for any reason (SIGKILL, a crash, a clean stop) the kernel deletes
//! the device and, with it, every route that points at it. No helper process and no
//! state file are needed to withdraw what a dead gateway announced.
//!
//! Nothing is ever read from or written to the device: routes pointing at it live in a
//! table no `ip rule` uses, so no packet is forwarded to it.
//!
//! The routes themselves are added and deleted with [`Netlink::add_dev_route`] and
//! [`Netlink::del_dev_route`](crate::netlink::Netlink::del_dev_route).
//!
//! This module must never touch the main routing table or a device it did not create.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

#[cfg(doc)]
use crate::netlink::Netlink;

/// Where the kernel's TUN driver is.
pub const TUN_PATH: &str = "/dev/net/tun";

/// Room for a `struct ifreq` (40 bytes on 64-bit Linux), aligned like one.
#[repr(C, align(8))]
struct IfReq([u8; 64]);

const _: () = assert!(std::mem::size_of::<IfReq>() >= std::mem::size_of::<libc::ifreq>());

/// Offset of the `ifr_ifru` union (here: `ifru_flags`, a c_short) inside `struct ifreq`.
const IFRU: usize = libc::IFNAMSIZ;

impl IfReq {
    fn named(name: &str) -> io::Result<IfReq> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name {name:?}: 1 to 15 bytes, no '/', space or NUL"),
            ));
        }
        let mut req = IfReq([0; 64]);
        req.0[..name.len()].copy_from_slice(name.as_bytes());
        Ok(req)
    }

    fn flags(&self) -> i16 {
        i16::from_ne_bytes([self.0[IFRU], self.0[IFRU + 1]])
    }

    fn set_flags(&mut self, flags: i16) {
        self.0[IFRU..IFRU + 2].copy_from_slice(&flags.to_ne_bytes());
    }
}

/// Runs one ioctl taking a `struct ifreq` on `fd`.
fn ifreq_ioctl(fd: &OwnedFd, request: libc::Ioctl, req: &mut IfReq, what: &str) -> io::Result<()> {
    // SAFETY: every request used here (TUNSETIFF, SIOCGIFFLAGS, SIOCSIFFLAGS) reads and
    // writes one struct ifreq, and `req` is a writable buffer at least that large and
    // suitably aligned, live for the whole call; `fd` is open.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), request, req.0.as_mut_ptr()) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

/// A datagram socket for the SIOC[GS]IF* ioctls.
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A TUN device (`IFF_TUN | IFF_NO_PI`, not persistent) that exists while this value does.
#[derive(Debug)]
pub struct AnnounceDevice {
    /// The TUN queue; closing it deletes the device and its routes.
    fd: OwnedFd,
    name: String,
    index: u32,
}

impl AnnounceDevice {
    /// Creates TUN device `name` and sets it up (a route can only point at a device that
    /// is up). Fails if `name` exists already (another gateway's device, or any other
    /// interface): taking over someone else's device would let its owner's exit delete
    /// our routes.
    pub fn create(name: &str) -> io::Result<AnnounceDevice> {
        let mut req = IfReq::named(name)?;
        if crate::netlink::if_index(name).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("interface {name} exists already (another gateway's [routing] device?); pick another [routing] device"),
            ));
        }
        let path = std::ffi::CString::new(TUN_PATH).map_err(io::Error::other)?;
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{TUN_PATH}: {e}")));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        req.set_flags((libc::IFF_TUN | libc::IFF_NO_PI) as i16);
        ifreq_ioctl(&fd, libc::TUNSETIFF, &mut req, "TUNSETIFF")?;
        let index = crate::netlink::if_index(name)?;
        let dev = AnnounceDevice {
            fd,
            name: name.to_owned(),
            index,
        };
        dev.set_up()?;
        Ok(dev)
    }

    /// Sets the device administratively up (SIOCSIFFLAGS with IFF_UP).
    fn set_up(&self) -> io::Result<()> {
        let sock = ioctl_socket()?;
        let mut req = IfReq::named(&self.name)?;
        ifreq_ioctl(&sock, libc::SIOCGIFFLAGS, &mut req, "SIOCGIFFLAGS")?;
        req.set_flags(req.flags() | libc::IFF_UP as i16);
        ifreq_ioctl(&sock, libc::SIOCSIFFLAGS, &mut req, "SIOCSIFFLAGS")
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device's interface index, for the routes' output interface.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The TUN queue's descriptor (held only to keep the device alive).
    pub fn as_raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// Whether interface `name` is operationally up: administratively up (`IFF_UP`) and with
/// a working lower layer (`IFF_RUNNING`: carrier, a veth's peer up). One ioctl; for a
/// supervisor's periodic check, never for the data path.
pub fn link_running(name: &str) -> io::Result<bool> {
    let sock = ioctl_socket()?;
    let mut req = IfReq::named(name)?;
    ifreq_ioctl(&sock, libc::SIOCGIFFLAGS, &mut req, name)?;
    let f = i32::from(req.flags()) & 0xffff;
    Ok(f & libc::IFF_UP != 0 && f & libc::IFF_RUNNING != 0)
}

/// Whether this host can create TUN devices (the driver's node exists), for preflight.
pub fn tun_available() -> io::Result<()> {
    std::fs::metadata(TUN_PATH).map(drop).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{TUN_PATH}: {e} (load the tun module: modprobe tun; in a container, pass the device through)"),
        )
    })
}

#[cfg(test)]
mod tests;
