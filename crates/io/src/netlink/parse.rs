//! Bounds-checked parsing and building of rtnetlink messages (IPv4 and IPv6).
//!
//! Every length read from the kernel is checked against the bytes that are
//! really there: malformed input gives a [`ParseError`], never a panic or an
//! out-of-bounds read. Netlink is in host byte order, so are these views.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use thiserror::Error;

use super::{Event, Family, Neighbor, Route};

/// Kernel ABI numbers, typed for this module. Values from the uapi headers
/// named on each group; a test compares those libc also has.
pub(super) mod sys {
    // <linux/netlink.h>
    /// sizeof(struct nlmsghdr), already NLMSG_ALIGNed.
    pub const NLMSG_HDRLEN: usize = 16;
    /// sizeof(struct nlattr) / struct rtattr.
    pub const NLA_HDRLEN: usize = 4;
    pub const NLMSG_ERROR: u16 = 2;
    pub const NLMSG_DONE: u16 = 3;
    pub const NLM_F_REQUEST: u16 = 0x01;
    pub const NLM_F_ACK: u16 = 0x04;
    /// Set on every part of a dump that raced with a change (the dump may be inconsistent).
    pub const NLM_F_DUMP_INTR: u16 = 0x10;
    /// NLM_F_ROOT | NLM_F_MATCH.
    pub const NLM_F_DUMP: u16 = 0x300;
    pub const NLM_F_REPLACE: u16 = 0x100;
    pub const NLM_F_CREATE: u16 = 0x400;
    /// Attribute type bits without NLA_F_NESTED and NLA_F_NET_BYTEORDER.
    pub const NLA_TYPE_MASK: u16 = 0x3fff;
    /// <linux/socket.h>: SOL_NETLINK.
    pub const SOL_NETLINK: i32 = 270;
    pub const NETLINK_ADD_MEMBERSHIP: i32 = 1;

    // <linux/rtnetlink.h>
    pub const RTM_NEWADDR: u16 = 20;
    pub const RTM_GETADDR: u16 = 22;
    pub const RTM_NEWROUTE: u16 = 24;
    pub const RTM_DELROUTE: u16 = 25;
    pub const RTM_GETROUTE: u16 = 26;
    pub const RTM_NEWNEIGH: u16 = 28;
    pub const RTM_DELNEIGH: u16 = 29;
    pub const RTM_GETNEIGH: u16 = 30;
    /// Multicast group numbers (bit n-1 of the legacy nl_groups mask).
    pub const RTNLGRP_NEIGH: u32 = 3;
    pub const RTNLGRP_IPV4_ROUTE: u32 = 7;
    pub const RTNLGRP_IPV6_ROUTE: u32 = 11;
    /// rtm_type values of routes that match but send nowhere.
    pub const RTN_BLACKHOLE: u8 = 6;
    pub const RTN_UNREACHABLE: u8 = 7;
    pub const RTN_PROHIBIT: u8 = 8;
    pub const RTA_DST: u16 = 1;
    pub const RTA_OIF: u16 = 4;
    pub const RTA_GATEWAY: u16 = 5;
    pub const RTA_PREFSRC: u16 = 7;
    pub const RTA_MULTIPATH: u16 = 9;
    pub const RTA_TABLE: u16 = 15;
    /// sizeof(struct rtmsg), sizeof(struct ndmsg), sizeof(struct ifaddrmsg), sizeof(struct rtnexthop).
    pub const RTMSG_LEN: usize = 12;
    pub const NDMSG_LEN: usize = 12;
    pub const IFADDRMSG_LEN: usize = 8;
    pub const RTNEXTHOP_LEN: usize = 8;

    // <linux/neighbour.h>
    pub const NDA_DST: u16 = 1;
    pub const NDA_LLADDR: u16 = 2;
    /// ndm_flags: "use" the entry as the data path would (kernel resolves it).
    pub const NTF_USE: u8 = 0x01;

    // <linux/if_addr.h>
    pub const IFA_ADDRESS: u16 = 1;
    pub const IFA_LOCAL: u16 = 2;

    /// AF_INET and AF_INET6 as the one-byte family field of ndmsg/rtmsg/ifaddrmsg.
    pub const AF_INET: u8 = 2;
    pub const AF_INET6: u8 = 10;
}

/// Why bytes from the kernel could not be parsed as netlink.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// Fewer bytes left than a message header.
    #[error("netlink: message at byte {offset}: {avail} bytes left, a header needs 16")]
    TruncatedHeader {
        /// Where the message starts in the datagram.
        offset: usize,
        /// Bytes from there to the end of the datagram.
        avail: usize,
    },
    /// nlmsg_len smaller than the header or past the end of the datagram.
    #[error("netlink: message at byte {offset}: length {len} is outside 16..={avail}")]
    BadMessageLength {
        /// Where the message starts in the datagram.
        offset: usize,
        /// Its nlmsg_len.
        len: u32,
        /// Bytes from there to the end of the datagram.
        avail: usize,
    },
    /// A message body shorter than its fixed header.
    #[error("netlink: {what}: body of {len} bytes, needs at least {need}")]
    ShortBody {
        /// The structure that is short ("rtmsg", "ndmsg", ...).
        what: &'static str,
        /// Bytes of body it has.
        len: usize,
        /// Bytes its fixed header needs.
        need: usize,
    },
    /// An attribute length smaller than its header or past the end of its container.
    #[error("netlink: attribute at byte {offset}: length {len} is outside 4..={avail}")]
    BadAttrLength {
        /// Where the attribute starts in its container.
        offset: usize,
        /// Its nla_len.
        len: u16,
        /// Bytes from there to the end of the container.
        avail: usize,
    },
    /// An attribute whose payload has the wrong size for its type.
    #[error("netlink: {what}: attribute {attr} has {len} bytes, expected {need}")]
    BadAttrSize {
        /// The structure it belongs to ("rtmsg", "ndmsg", ...).
        what: &'static str,
        /// Its type (nla_type).
        attr: u16,
        /// Bytes of payload it has.
        len: usize,
        /// Bytes its type has.
        need: usize,
    },
    /// A prefix length longer than the family's addresses (32 for IPv4, 128 for IPv6).
    #[error("netlink: {what}: prefix length {len} is longer than {max}")]
    BadPrefixLen {
        /// The structure it belongs to ("rtmsg", "ndmsg", ...).
        what: &'static str,
        /// The prefix length given.
        len: u8,
        /// The family's address length in bits.
        max: u8,
    },
}

impl From<ParseError> for io::Error {
    fn from(e: ParseError) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// Rounds up to the 4-byte netlink alignment (NLMSG_ALIGN / NLA_ALIGN).
pub(super) const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

pub(super) fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

pub(super) fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// One netlink message: the header fields and the body after the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NlMsg<'a> {
    pub(super) ty: u16,
    pub(super) flags: u16,
    pub(super) seq: u32,
    pub(super) pid: u32,
    pub(super) body: &'a [u8],
}

/// Iterates the messages of one datagram; stops after the first error.
pub(super) struct Messages<'a> {
    buf: &'a [u8],
    off: usize,
    failed: bool,
}

impl<'a> Messages<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Messages {
            buf,
            off: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<NlMsg<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self
            .buf
            .get(self.off..)
            .filter(|r| !r.is_empty() && !self.failed)?;
        let offset = self.off;
        let parsed = (|| {
            let header = |o| u32_at(rest, o);
            let (Some(len), Some(tf), Some(seq), Some(pid)) =
                (header(0), header(4), header(8), header(12))
            else {
                return Err(ParseError::TruncatedHeader {
                    offset,
                    avail: rest.len(),
                });
            };
            let body = usize::try_from(len)
                .ok()
                .filter(|&l| l >= sys::NLMSG_HDRLEN)
                .and_then(|l| rest.get(sys::NLMSG_HDRLEN..l))
                .ok_or(ParseError::BadMessageLength {
                    offset,
                    len,
                    avail: rest.len(),
                })?;
            let tf = tf.to_ne_bytes();
            let msg = NlMsg {
                ty: u16::from_ne_bytes([tf[0], tf[1]]),
                flags: u16::from_ne_bytes([tf[2], tf[3]]),
                seq,
                pid,
                body,
            };
            Ok((msg, align4(sys::NLMSG_HDRLEN + body.len())))
        })();
        match parsed {
            Ok((msg, step)) => {
                self.off = self.off.saturating_add(step);
                Some(Ok(msg))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Iterates `(type, payload)` of route attributes; stops after the first error.
pub(super) struct Attrs<'a> {
    buf: &'a [u8],
    off: usize,
    failed: bool,
}

impl<'a> Attrs<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Attrs {
            buf,
            off: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<(u16, &'a [u8]), ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self
            .buf
            .get(self.off..)
            .filter(|r| !r.is_empty() && !self.failed)?;
        let offset = self.off;
        let item = match (u16_at(rest, 0), u16_at(rest, 2)) {
            (Some(len), Some(ty)) => match rest.get(sys::NLA_HDRLEN..usize::from(len)) {
                Some(payload) => {
                    self.off += align4(usize::from(len));
                    Ok((ty & sys::NLA_TYPE_MASK, payload))
                }
                None => Err(ParseError::BadAttrLength {
                    offset,
                    len,
                    avail: rest.len(),
                }),
            },
            // Fewer than 4 bytes left: report it as an attribute too short.
            _ => Err(ParseError::BadAttrLength {
                offset,
                len: 0,
                avail: rest.len(),
            }),
        };
        self.failed = item.is_err();
        Some(item)
    }
}

/// Reads an attribute payload that must be exactly one address of family `A`.
fn attr_addr<A: Family>(what: &'static str, attr: u16, p: &[u8]) -> Result<A, ParseError> {
    A::from_octets(p).ok_or(ParseError::BadAttrSize {
        what,
        attr,
        len: p.len(),
        need: usize::from(A::BITS / 8),
    })
}

/// A prefix length from a fixed header, checked against the family's address length.
fn prefix_len<A: Family>(what: &'static str, len: u8) -> Result<u8, ParseError> {
    if len > A::BITS {
        return Err(ParseError::BadPrefixLen {
            what,
            len,
            max: A::BITS,
        });
    }
    Ok(len)
}

/// Reads an attribute payload that must be exactly one host-order u32.
fn attr_u32(what: &'static str, attr: u16, p: &[u8]) -> Result<u32, ParseError> {
    <[u8; 4]>::try_from(p)
        .map(u32::from_ne_bytes)
        .map_err(|_| ParseError::BadAttrSize {
            what,
            attr,
            len: p.len(),
            need: 4,
        })
}

/// Splits a body into its fixed header (`need` bytes) and the attributes after it.
fn split_body<'a>(
    what: &'static str,
    body: &'a [u8],
    need: usize,
) -> Result<(&'a [u8], &'a [u8]), ParseError> {
    if body.len() < need {
        return Err(ParseError::ShortBody {
            what,
            len: body.len(),
            need,
        });
    }
    // NLMSG_ALIGN(need) == need for every fixed header used here.
    Ok(body.split_at(need))
}

/// Parses an RTM_NEWNEIGH/RTM_DELNEIGH body; `None` for other families or no NDA_DST.
pub(super) fn parse_neighbor<A: Family>(body: &[u8]) -> Result<Option<Neighbor<A>>, ParseError> {
    const WHAT: &str = "ndmsg";
    let (fixed, attrs) = split_body(WHAT, body, sys::NDMSG_LEN)?;
    if fixed[0] != A::AF {
        return Ok(None);
    }
    // struct ndmsg { u8 family, pad1; u16 pad2; s32 ifindex; u16 state; u8 flags, type; }
    let ifindex = u32_at(fixed, 4).unwrap_or(0);
    let state = u16_at(fixed, 8).unwrap_or(0);
    let (mut addr, mut mac) = (None, None);
    for a in Attrs::new(attrs) {
        match a? {
            (sys::NDA_DST, p) => addr = Some(attr_addr(WHAT, sys::NDA_DST, p)?),
            // Devices without 6-byte addresses (none, IPoIB) give no MAC.
            (sys::NDA_LLADDR, p) => mac = <[u8; 6]>::try_from(p).ok(),
            _ => {}
        }
    }
    Ok(addr.map(|addr| Neighbor {
        ifindex,
        addr,
        mac,
        state,
    }))
}

/// Parses an RTM_NEWROUTE/RTM_DELROUTE body; `None` for other families.
pub(super) fn parse_route<A: Family>(body: &[u8]) -> Result<Option<Route<A>>, ParseError> {
    const WHAT: &str = "rtmsg";
    let (fixed, attrs) = split_body(WHAT, body, sys::RTMSG_LEN)?;
    // struct rtmsg { u8 family, dst_len, src_len, tos, table, protocol, scope, type; u32 flags; }
    if fixed[0] != A::AF {
        return Ok(None);
    }
    let mut route = Route {
        // A default route has no RTA_DST: the all-zeros network.
        dst: A::UNSPECIFIED,
        prefix_len: prefix_len::<A>(WHAT, fixed[1])?,
        gateway: None,
        ifindex: 0,
        prefsrc: None,
        table: u32::from(fixed[4]),
    };
    let mut first_hop = None;
    for a in Attrs::new(attrs) {
        match a? {
            (t @ sys::RTA_DST, p) => route.dst = attr_addr(WHAT, t, p)?,
            (t @ sys::RTA_GATEWAY, p) => route.gateway = Some(attr_addr(WHAT, t, p)?),
            (t @ sys::RTA_OIF, p) => route.ifindex = attr_u32(WHAT, t, p)?,
            (t @ sys::RTA_PREFSRC, p) => route.prefsrc = Some(attr_addr(WHAT, t, p)?),
            (t @ sys::RTA_TABLE, p) => route.table = attr_u32(WHAT, t, p)?,
            (sys::RTA_MULTIPATH, p) => first_hop = parse_first_nexthop(p)?,
            _ => {}
        }
    }
    if route.ifindex == 0 {
        if let Some((ifindex, gateway)) = first_hop {
            route.ifindex = ifindex;
            route.gateway = route.gateway.or(gateway);
        }
    }
    // IPv6 reports blackhole, unreachable and prohibit routes on `lo`; they send nowhere.
    if matches!(
        fixed[7],
        sys::RTN_BLACKHOLE | sys::RTN_UNREACHABLE | sys::RTN_PROHIBIT
    ) {
        route.ifindex = 0;
    }
    Ok(Some(route))
}

/// The first `struct rtnexthop` of an RTA_MULTIPATH payload: (ifindex, gateway).
pub(super) fn parse_first_nexthop<A: Family>(
    p: &[u8],
) -> Result<Option<(u32, Option<A>)>, ParseError> {
    const WHAT: &str = "rtnexthop";
    // struct rtnexthop { u16 len; u8 flags, hops; s32 ifindex; } then attributes.
    let Some(len) = u16_at(p, 0) else {
        return Ok(None);
    };
    let hop = p
        .get(..usize::from(len))
        .filter(|h| h.len() >= sys::RTNEXTHOP_LEN)
        .ok_or(ParseError::ShortBody {
            what: WHAT,
            len: p.len(),
            need: usize::from(len).max(8),
        })?;
    let ifindex = u32_at(hop, 4).unwrap_or(0);
    let mut gateway = None;
    for a in Attrs::new(&hop[sys::RTNEXTHOP_LEN..]) {
        if let (t @ sys::RTA_GATEWAY, g) = a? {
            gateway = Some(attr_addr(WHAT, t, g)?);
        }
    }
    Ok(Some((ifindex, gateway)))
}

/// Parses an RTM_NEWADDR body: `(ifindex, address, prefix_len)`, `None` for other families.
pub(super) fn parse_ifaddr<A: Family>(body: &[u8]) -> Result<Option<(u32, A, u8)>, ParseError> {
    const WHAT: &str = "ifaddrmsg";
    let (fixed, attrs) = split_body(WHAT, body, sys::IFADDRMSG_LEN)?;
    // struct ifaddrmsg { u8 family, prefixlen, flags, scope; u32 index; }
    if fixed[0] != A::AF {
        return Ok(None);
    }
    let prefix_len = prefix_len::<A>(WHAT, fixed[1])?;
    let ifindex = u32_at(fixed, 4).unwrap_or(0);
    let (mut local, mut address) = (None, None);
    for a in Attrs::new(attrs) {
        match a? {
            // IFA_LOCAL is the own address; IFA_ADDRESS the peer on point-to-point links.
            (t @ sys::IFA_LOCAL, p) => local = Some(attr_addr(WHAT, t, p)?),
            (t @ sys::IFA_ADDRESS, p) => address = Some(attr_addr(WHAT, t, p)?),
            _ => {}
        }
    }
    Ok(local.or(address).map(|a| (ifindex, a, prefix_len)))
}

/// The errno of an NLMSG_ERROR body: `Ok(())` for an ack (error 0).
pub(super) fn check_error(body: &[u8]) -> io::Result<()> {
    let code = u32_at(body, 0).ok_or(ParseError::ShortBody {
        what: "nlmsgerr",
        len: body.len(),
        need: 4,
    })? as i32;
    match code {
        0 => Ok(()),
        c => Err(io::Error::from_raw_os_error(
            c.checked_neg().unwrap_or(i32::MAX),
        )),
    }
}

/// The error a dump's NLMSG_DONE may carry (a negative errno); short bodies mean none.
pub(super) fn check_done(body: &[u8]) -> io::Result<()> {
    match u32_at(body, 0).map(|c| c as i32) {
        Some(c) if c < 0 => Err(io::Error::from_raw_os_error(
            c.checked_neg().unwrap_or(i32::MAX),
        )),
        _ => Ok(()),
    }
}

/// Turns one message from an event socket into an [`Event`], if it is one.
pub(super) fn parse_event(msg: &NlMsg<'_>) -> Result<Option<Event>, ParseError> {
    type V4 = Ipv4Addr;
    type V6 = Ipv6Addr;
    let b = msg.body;
    // The family is the first byte of ndmsg and rtmsg alike; each parser skips the other.
    let v6 = b.first() == Some(&sys::AF_INET6);
    Ok(match (msg.ty, v6) {
        (sys::RTM_NEWNEIGH, false) => parse_neighbor::<V4>(b)?.map(Event::NeighborAdded),
        (sys::RTM_DELNEIGH, false) => parse_neighbor::<V4>(b)?.map(Event::NeighborRemoved),
        (sys::RTM_NEWROUTE, false) => parse_route::<V4>(b)?.map(Event::RouteAdded),
        (sys::RTM_DELROUTE, false) => parse_route::<V4>(b)?.map(Event::RouteRemoved),
        (sys::RTM_NEWNEIGH, true) => parse_neighbor::<V6>(b)?.map(Event::Neighbor6Added),
        (sys::RTM_DELNEIGH, true) => parse_neighbor::<V6>(b)?.map(Event::Neighbor6Removed),
        (sys::RTM_NEWROUTE, true) => parse_route::<V6>(b)?.map(Event::Route6Added),
        (sys::RTM_DELROUTE, true) => parse_route::<V6>(b)?.map(Event::Route6Removed),
        _ => None,
    })
}

/// Builds one request: header, fixed body, NLA_ALIGN-padded attributes.
pub(super) struct MsgBuilder {
    buf: Vec<u8>,
}

impl MsgBuilder {
    pub(super) fn new(ty: u16, flags: u16, seq: u32) -> Self {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set by finish()
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel fills it
        MsgBuilder { buf }
    }

    fn pad(&mut self) {
        self.buf.resize(align4(self.buf.len()), 0);
    }

    pub(super) fn body(mut self, fixed: &[u8]) -> Self {
        self.buf.extend_from_slice(fixed);
        self.pad();
        self
    }

    pub(super) fn attr(mut self, ty: u16, payload: &[u8]) -> Self {
        let len = u16::try_from(sys::NLA_HDRLEN + payload.len()).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.pad();
        self
    }

    pub(super) fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}
