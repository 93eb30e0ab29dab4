//! The NETLINK_ROUTE socket (dumps, probes, events) and interface facts
//! (index, MAC, MTU, addresses) from ioctls.
//!
//! This is the one place in the module with `unsafe`: raw socket calls,
//! each with its `// SAFETY:` reason. Replies are parsed by the `parse` module.

use std::ffi::CString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::parse::*;
use super::{nud, Event, Family, Neighbor, Neighbor6, Route, Route6};

/// Size of the receive buffer; a kernel dump datagram is at most ~32 KiB.
const RECV_BUF_LEN: usize = 64 * 1024;
/// Receive buffer asked for on event sockets, so bursts do not overrun (ENOBUFS).
const EVENT_RCVBUF: i32 = 4 * 1024 * 1024;
/// Most datagrams one `recv_events` call reads before returning.
const MAX_EVENT_DATAGRAMS: usize = 256;
/// How often a dump that raced with changes (NLM_F_DUMP_INTR) is retried.
const DUMP_ATTEMPTS: usize = 5;

/// A NETLINK_ROUTE socket: requests (dumps, probes) or, after
/// [`Netlink::subscribe`], neighbour and route events of both families.
///
/// Use separate sockets for the two jobs: a dump on an event socket would
/// skip (drop) the events that arrive while it runs.
pub struct Netlink {
    fd: OwnedFd,
    seq: u32,
    port_id: u32,
    buf: Vec<u8>,
}

/// Converts a libc return value (-1 = failure) into an `io::Result`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn setsockopt_int(fd: &OwnedFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and we pass its exact size; the fd is open.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// A `sockaddr_nl` for `pid` (0 = the kernel) and no legacy groups.
fn sockaddr_nl(pid: u32) -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain old data (integers only); all-zero is valid.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_pid = pid;
    sa
}

/// Receives one datagram into `buf`; an oversized (truncated) datagram is an error.
fn recv_into(fd: &OwnedFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of buf.len() bytes for the whole call;
        // MSG_TRUNC only changes the returned length, never the bytes written.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                flags | libc::MSG_TRUNC,
            )
        };
        match usize::try_from(n) {
            Ok(n) if n > buf.len() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("netlink: datagram of {n} bytes truncated to {}", buf.len()),
                ))
            }
            Ok(n) => return Ok(n),
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

impl Netlink {
    /// Opens a NETLINK_ROUTE socket for requests (dumps, probes).
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
        let raw = cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        })?;
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut sa = sockaddr_nl(0); // pid 0: the kernel assigns our port id
        let mut sa_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: `sa` is a valid sockaddr_nl and `sa_len` its size.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                sa_len,
            )
        })?;
        // SAFETY: `sa`/`sa_len` are writable and describe a sockaddr_nl-sized buffer.
        cvt(unsafe {
            libc::getsockname(
                fd.as_raw_fd(),
                (&mut sa as *mut libc::sockaddr_nl).cast(),
                &mut sa_len,
            )
        })?;
        Ok(Netlink {
            fd,
            seq: 1,
            port_id: sa.nl_pid,
            buf: vec![0; RECV_BUF_LEN],
        })
    }

    /// Opens a socket joined to RTNLGRP_NEIGH (both families), RTNLGRP_IPV4_ROUTE and
    /// RTNLGRP_IPV6_ROUTE, for [`Netlink::recv_events`].
    pub fn subscribe() -> io::Result<Self> {
        let nl = Self::open()?;
        let groups = [
            sys::RTNLGRP_NEIGH,
            sys::RTNLGRP_IPV4_ROUTE,
            sys::RTNLGRP_IPV6_ROUTE,
        ];
        for group in groups {
            setsockopt_int(
                &nl.fd,
                sys::SOL_NETLINK,
                sys::NETLINK_ADD_MEMBERSHIP,
                group as i32,
            )?;
        }
        // Best effort: the kernel caps SO_RCVBUF at net.core.rmem_max; an
        // overrun still shows up as ENOBUFS from recv_events.
        let _ = setsockopt_int(&nl.fd, libc::SOL_SOCKET, libc::SO_RCVBUF, EVENT_RCVBUF);
        Ok(nl)
    }

    /// The socket's file descriptor, for a caller's own poll loop.
    pub fn as_raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        let kernel = sockaddr_nl(0);
        loop {
            // SAFETY: `msg` is readable for msg.len() bytes; `kernel` is a valid sockaddr_nl.
            let n = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    msg.as_ptr().cast(),
                    msg.len(),
                    0,
                    (&kernel as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Runs one dump request and parses every part with `parse`, retrying a dump
    /// that raced with changes. Replies to older requests are skipped by sequence number.
    pub(super) fn dump<T>(
        &mut self,
        ty: u16,
        fixed: &[u8],
        mut parse: impl FnMut(&NlMsg<'_>) -> Result<Option<T>, ParseError>,
    ) -> io::Result<Vec<T>> {
        for _ in 0..DUMP_ATTEMPTS {
            let seq = self.next_seq();
            self.send(
                &MsgBuilder::new(ty, sys::NLM_F_REQUEST | sys::NLM_F_DUMP, seq)
                    .body(fixed)
                    .finish(),
            )?;
            let (mut out, mut interrupted) = (Vec::new(), false);
            'parts: loop {
                let n = recv_into(&self.fd, &mut self.buf, 0)?;
                for msg in Messages::new(&self.buf[..n]) {
                    let msg = msg?;
                    if msg.seq != seq || msg.pid != self.port_id {
                        continue;
                    }
                    interrupted |= msg.flags & sys::NLM_F_DUMP_INTR != 0;
                    match msg.ty {
                        sys::NLMSG_DONE => {
                            check_done(msg.body)?;
                            break 'parts;
                        }
                        sys::NLMSG_ERROR => {
                            check_error(msg.body)?;
                            break 'parts;
                        }
                        _ => out.extend(parse(&msg)?),
                    }
                }
            }
            if !interrupted {
                return Ok(out);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::Interrupted,
            format!("netlink: dump {ty} raced with changes {DUMP_ATTEMPTS} times in a row"),
        ))
    }

    /// Dumps one kind of object of family `A`: request `get` with an all-zero fixed
    /// header of `fixed_len` bytes but for the family, replies `new` parsed by `parse`.
    fn dump_family<A: Family, T>(
        &mut self,
        (get, new, fixed_len): (u16, u16, usize),
        parse: fn(&[u8]) -> Result<Option<T>, ParseError>,
    ) -> io::Result<Vec<T>> {
        let mut fixed = vec![0u8; fixed_len];
        fixed[0] = A::AF;
        self.dump(get, &fixed, |m| match m.ty {
            t if t == new => parse(m.body),
            _ => Ok(None),
        })
    }

    fn dump_neighbors_of<A: Family>(&mut self) -> io::Result<Vec<Neighbor<A>>> {
        let kind = (sys::RTM_GETNEIGH, sys::RTM_NEWNEIGH, sys::NDMSG_LEN);
        self.dump_family::<A, _>(kind, parse_neighbor::<A>)
    }

    fn dump_routes_of<A: Family>(&mut self) -> io::Result<Vec<Route<A>>> {
        let kind = (sys::RTM_GETROUTE, sys::RTM_NEWROUTE, sys::RTMSG_LEN);
        self.dump_family::<A, _>(kind, parse_route::<A>)
    }

    fn dump_addrs<A: Family>(&mut self) -> io::Result<Vec<(u32, A, u8)>> {
        let kind = (sys::RTM_GETADDR, sys::RTM_NEWADDR, sys::IFADDRMSG_LEN);
        self.dump_family::<A, _>(kind, parse_ifaddr::<A>)
    }

    /// All IPv4 neighbour (ARP) entries, in every state (RTM_GETNEIGH dump).
    pub fn dump_neighbors(&mut self) -> io::Result<Vec<Neighbor>> {
        self.dump_neighbors_of()
    }

    /// All IPv6 neighbour (ND) entries, in every state (RTM_GETNEIGH dump).
    pub fn dump_neighbors6(&mut self) -> io::Result<Vec<Neighbor6>> {
        self.dump_neighbors_of()
    }

    /// All IPv4 routes of every table (RTM_GETROUTE dump); filter on [`Route::table`].
    ///
    /// For one prefix the kernel lists the lowest metric first.
    pub fn dump_routes(&mut self) -> io::Result<Vec<Route>> {
        self.dump_routes_of()
    }

    /// All IPv6 routes of every table (RTM_GETROUTE dump), as [`Netlink::dump_routes`].
    pub fn dump_routes6(&mut self) -> io::Result<Vec<Route6>> {
        self.dump_routes_of()
    }

    /// All IPv4 interface addresses: `(ifindex, address, prefix_len)` (RTM_GETADDR dump).
    pub fn dump_ipv4_addrs(&mut self) -> io::Result<Vec<(u32, Ipv4Addr, u8)>> {
        self.dump_addrs()
    }

    /// All IPv6 interface addresses: `(ifindex, address, prefix_len)` (RTM_GETADDR dump),
    /// link-local and still tentative ones included.
    pub fn dump_ipv6_addrs(&mut self) -> io::Result<Vec<(u32, Ipv6Addr, u8)>> {
        self.dump_addrs()
    }

    /// Asks the kernel to resolve `addr` on `ifindex` as `ip neigh replace ADDR dev IF use`
    /// would: RTM_NEWNEIGH with NTF_USE, creating an entry if there is none.
    ///
    /// Returns once the kernel acknowledged the request; the answer (if any)
    /// arrives later as a neighbour event or in the next dump.
    pub fn probe_neighbor(&mut self, ifindex: u32, addr: Ipv4Addr) -> io::Result<()> {
        self.probe(ifindex, IpAddr::V4(addr))
    }

    /// As [`Netlink::probe_neighbor`] for an IPv6 neighbour: the kernel starts
    /// neighbour discovery (`ip -6 neigh replace ADDR dev IF use`).
    pub fn probe_neighbor6(&mut self, ifindex: u32, addr: Ipv6Addr) -> io::Result<()> {
        self.probe(ifindex, IpAddr::V6(addr))
    }

    fn probe(&mut self, ifindex: u32, addr: IpAddr) -> io::Result<()> {
        let (family, octets) = match addr {
            IpAddr::V4(a) => (sys::AF_INET, a.octets().to_vec()),
            IpAddr::V6(a) => (sys::AF_INET6, a.octets().to_vec()),
        };
        // struct ndmsg: family, ifindex, state NUD_NONE (so a created
        // entry is an ordinary, garbage-collectable one), flags NTF_USE.
        let mut fixed = [0u8; sys::NDMSG_LEN];
        fixed[0] = family;
        fixed[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        fixed[8..10].copy_from_slice(&nud::NONE.to_ne_bytes());
        fixed[10] = sys::NTF_USE;
        let seq = self.next_seq();
        let flags = sys::NLM_F_REQUEST | sys::NLM_F_ACK | sys::NLM_F_CREATE | sys::NLM_F_REPLACE;
        let req = MsgBuilder::new(sys::RTM_NEWNEIGH, flags, seq)
            .body(&fixed)
            .attr(sys::NDA_DST, &octets)
            .finish();
        self.send(&req)?;
        loop {
            let n = recv_into(&self.fd, &mut self.buf, 0)?;
            for msg in Messages::new(&self.buf[..n]) {
                let msg = msg?;
                if msg.seq == seq && msg.pid == self.port_id && msg.ty == sys::NLMSG_ERROR {
                    return check_error(msg.body);
                }
            }
        }
    }

    /// Sends one request of type `ty` (fixed header `fixed`, then `attrs`) with NLM_F_ACK
    /// and waits for the kernel's answer: `Ok` on an acknowledgement, the kernel's error
    /// otherwise. For the announced routes (`devroute`).
    pub(super) fn request_ack(
        &mut self,
        ty: u16,
        flags: u16,
        fixed: &[u8],
        attrs: &[(u16, &[u8])],
    ) -> io::Result<()> {
        let seq = self.next_seq();
        let mut b =
            MsgBuilder::new(ty, sys::NLM_F_REQUEST | sys::NLM_F_ACK | flags, seq).body(fixed);
        for (t, payload) in attrs {
            b = b.attr(*t, payload);
        }
        self.send(&b.finish())?;
        loop {
            let n = recv_into(&self.fd, &mut self.buf, 0)?;
            for msg in Messages::new(&self.buf[..n]) {
                let msg = msg?;
                if msg.seq == seq && msg.pid == self.port_id && msg.ty == sys::NLMSG_ERROR {
                    return check_error(msg.body);
                }
            }
        }
    }

    /// Waits up to `timeout` for events and returns all that are queued (empty on timeout).
    ///
    /// An overrun socket gives an error for which [`is_events_lost`](super::is_events_lost) is true
    /// (ENOBUFS): events were dropped and the caller must dump again.
    pub fn recv_events(&mut self, timeout: Duration) -> io::Result<Vec<Event>> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX);
        loop {
            // SAFETY: `pfd` is one valid pollfd and we pass nfds = 1.
            match cvt(unsafe { libc::poll(&mut pfd, 1, ms) }) {
                Ok(0) => return Ok(Vec::new()),
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let mut events = Vec::new();
        // Bounded, so a storm of changes cannot keep the caller here forever;
        // what is left stays queued for the next call.
        for _ in 0..MAX_EVENT_DATAGRAMS {
            let n = match recv_into(&self.fd, &mut self.buf, libc::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(events),
                Err(e) => return Err(e),
            };
            for msg in Messages::new(&self.buf[..n]) {
                events.extend(parse_event(&msg?)?);
            }
        }
        Ok(events)
    }
}

// ---------------------------------------------------------------------------
// Interface facts.
// ---------------------------------------------------------------------------

fn no_such_interface(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("no such interface: {name}"),
    )
}

/// Checks an interface name the way the kernel would (1..16 bytes, no NUL or '/').
fn valid_ifname(name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['\0', '/']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name: {name:?}"),
        ));
    }
    Ok(())
}

/// The index of interface `name` (if_nametoindex) in the caller's network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    valid_ifname(name)?;
    let c = CString::new(name).map_err(|_| no_such_interface(name))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(no_such_interface(name)),
        i => Ok(i),
    }
}

/// Room for a `struct ifreq` (40 bytes on 64-bit Linux), aligned like one.
#[repr(C, align(8))]
struct IfReq([u8; 64]);

const _: () = assert!(std::mem::size_of::<IfReq>() >= std::mem::size_of::<libc::ifreq>());

/// Runs one SIOCGIF* ioctl for `name` and returns the filled request bytes.
fn ifreq_ioctl(name: &str, request: libc::Ioctl) -> io::Result<IfReq> {
    valid_ifname(name)?;
    let mut req = IfReq([0; 64]);
    // ifr_name, NUL-terminated by the zeros after it (the name is < IFNAMSIZ).
    req.0[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
    let raw =
        cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: the SIOCGIF* requests used here read and write one struct ifreq,
    // and `req` is a writable buffer at least that large and suitably aligned.
    let ret = unsafe { libc::ioctl(sock.as_raw_fd(), request, req.0.as_mut_ptr()) };
    match cvt(ret) {
        Ok(_) => Ok(req),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Err(no_such_interface(name)),
        Err(e) => Err(io::Error::new(e.kind(), format!("interface {name}: {e}"))),
    }
}

/// Offset of the `ifr_ifru` union inside `struct ifreq`.
const IFRU: usize = libc::IFNAMSIZ;

/// The Ethernet MAC address of interface `name` (SIOCGIFHWADDR); an error for non-Ethernet devices.
pub fn if_mac(name: &str) -> io::Result<[u8; 6]> {
    let req = ifreq_ioctl(name, libc::SIOCGIFHWADDR)?;
    // ifru_hwaddr: struct sockaddr { u16 sa_family (ARPHRD_*); u8 sa_data[14]; }
    let family = u16_at(&req.0, IFRU).unwrap_or(0);
    if family != libc::ARPHRD_ETHER {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("interface {name} is not Ethernet (ARPHRD {family})"),
        ));
    }
    let mut mac = [0; 6];
    mac.copy_from_slice(&req.0[IFRU + 2..IFRU + 8]);
    Ok(mac)
}

/// The MTU of interface `name` (SIOCGIFMTU).
pub fn if_mtu(name: &str) -> io::Result<u32> {
    let req = ifreq_ioctl(name, libc::SIOCGIFMTU)?;
    Ok(u32_at(&req.0, IFRU).unwrap_or(0))
}

/// The IPv4 addresses (with prefix length) configured on interface `ifindex`.
pub fn if_ipv4_addrs(ifindex: u32) -> io::Result<Vec<(Ipv4Addr, u8)>> {
    if_addrs(ifindex)
}

/// The IPv6 addresses (with prefix length) configured on interface `ifindex`,
/// link-local and still tentative ones included.
pub fn if_ipv6_addrs(ifindex: u32) -> io::Result<Vec<(Ipv6Addr, u8)>> {
    if_addrs(ifindex)
}

fn if_addrs<A: Family>(ifindex: u32) -> io::Result<Vec<(A, u8)>> {
    let all = Netlink::open()?.dump_addrs::<A>()?;
    Ok(all
        .into_iter()
        .filter(|a| a.0 == ifindex)
        .map(|(_, a, l)| (a, l))
        .collect())
}
