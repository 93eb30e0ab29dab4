//! Which way a packet travels, and why a packet was dropped (what the gateway sends
//! instead is [`crate::mode::Emit`]).

/// Which way a packet crosses the NAT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the inside (private) network towards the outside.
    Outbound,
    /// From the outside towards the public addresses of the NAT.
    Inbound,
}

/// What a receive offload left unfinished in a packet (see
/// `Frame::offload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    /// A complete packet.
    None,
    /// The transport checksum field holds only the pseudo-header sum (CHECKSUM_PARTIAL).
    PartialCsum,
    /// A GSO super-packet: partial transport checksum, IPv4 header checksum not final.
    Gso,
}

macro_rules! drop_reasons {
    ($( $(#[$doc:meta])* $name:ident => $label:literal, )*) => {
        /// Why a packet was dropped. `as_str()` is also the metric label.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $( $(#[$doc])* $name, )*
        }

        impl DropReason {
            /// Every reason, in declaration order (index = `self as usize`).
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name,)*];

            /// How many reasons there are.
            pub const COUNT: usize = [$(DropReason::$name,)*].len();

            /// The stable, snake_case label used in summaries and metrics.
            pub fn as_str(self) -> &'static str {
                match self { $(DropReason::$name => $label,)* }
            }
        }
    };
}

drop_reasons! {
    /// The packet is shorter than its headers say.
    Truncated => "truncated",
    /// A header field is invalid (IP version, IHL, length fields).
    Malformed => "malformed",
    /// The IPv4 header checksum is wrong.
    BadIpChecksum => "bad_ip_checksum",
    /// Not an IPv4 packet on a NAT44 path.
    NotIpv4 => "not_ipv4",
    /// An IPv4 fragment the NAT cannot track: of a protocol it does not translate, of an
    /// ICMP error, or a first fragment too short to hold the whole transport header
    /// (RFC 1858's tiny fragments).
    Fragment => "fragment",
    /// A non-first fragment whose first fragment has not passed, not held for it
    /// (`fragment_hold_bytes = 0`, or on a hairpin's return pass): see `nat44::frag`.
    FragmentOutOfOrder => "fragment_out_of_order",
    /// A later fragment that arrived before its datagram's first, held for it (virtual
    /// reassembly, `nat44::frag`), or a copy of one held: sent, translated, right after
    /// the first fragment; counted again as `fragment_expired` if that never comes.
    FragmentHeld => "fragment_held",
    /// A held fragment whose datagram's first fragment did not come within
    /// `fragment_timeout`.
    FragmentExpired => "fragment_expired",
    /// A later fragment not held (its source's share of `fragment_hold_bytes` is spent),
    /// or held ones pushed out, oldest first, to make room for newer ones.
    FragmentHoldFull => "fragment_hold_full",
    /// A fragment overlapping another of its datagram, or a TCP fragment inside the TCP
    /// header (RFC 5722, RFC 1858, RFC 3128): the datagram is refused, what it held too.
    FragmentOverlap => "fragment_overlap",
    /// A datagram of more than 64 fragments.
    FragmentTooMany => "fragment_too_many",
    /// The fragment table is full: a new fragmented datagram is refused, the ones in
    /// flight continue.
    FragmentTableFull => "fragment_table_full",
    /// A transport protocol the NAT cannot translate (no ports or identifiers).
    UnsupportedProtocol => "unsupported_protocol",
    /// A protocol translated by address only (GRE, ESP, ...) whose (public
    /// address, remote, protocol) another inside host holds: one host at a time.
    AddressOnlyInUse => "address_only_in_use",
    /// A PPTP control message opening a call when the NAT tracks `MAX_CALLS` calls
    /// already, or its inside host `MAX_CALLS_PER_HOST` (`nat44::pptp`): refused, its
    /// sender retransmits.
    PptpCallsFull => "pptp_calls_full",
    /// An ICMP type that is neither a query the NAT tracks nor an error it translates.
    UnsupportedIcmp => "unsupported_icmp",
    /// TTL would reach zero at this hop.
    TtlExpired => "ttl_expired",
    /// Outbound from an address no rule covers.
    NoRule => "no_rule",
    /// Inbound to a public address and port with no mapping.
    NoMapping => "no_mapping",
    /// A mapping exists but the filtering behaviour refuses this outside endpoint.
    Filtered => "filtered",
    /// The inside host's public address has no free port (paired pooling never switches address).
    PoolExhausted => "pool_exhausted",
    /// The session table is at capacity: new flows are refused, established ones continue.
    TableFull => "table_full",
    /// The inside host holds `max_sessions_per_host` sessions, or `max_ports_per_host`
    /// public ports of this protocol (RFC 6888 REQ-4/REQ-5): its new flow is refused,
    /// its existing ones and every other host's continue.
    SubscriberLimit => "subscriber_limit",
    /// An ICMP error quoting a packet that belongs to no session.
    IcmpErrorNoSession => "icmp_error_no_session",
    /// An ICMP error whose quoted packet cannot be parsed.
    IcmpErrorMalformed => "icmp_error_malformed",
    /// A packet matched a connection record from the wrong side (spoofed inside address).
    WrongDirection => "wrong_direction",
    /// An inside host addressed a public address while hairpinning is off.
    HairpinDisabled => "hairpin_disabled",
    /// Not an IPv6 packet where IPv6 is expected (NAT64 inside, SIIT IPv6 side).
    NotIpv6 => "not_ipv6",
    /// An address with no translation: outside the Pref64 and the explicit mappings, or a
    /// non-global IPv4 address under the Well-Known Prefix (RFC 6052 §3.1).
    NoAddressMapping => "no_address_mapping",
    /// IPv4 with DF set, too big for the next hop once translated (RFC 7915 §4: answered
    /// with ICMPv4 Fragmentation Needed).
    FragmentNeeded => "fragment_needed",
    /// Too big for the next hop as IPv6, or IPv6 too big for the IPv4 MTU once translated
    /// (RFC 7915 §5): answered with ICMPv6 Packet Too Big.
    PacketTooBig => "packet_too_big",
    /// IPv4 without DF too big for the IPv6 MTU that could not be cut into fragments
    /// (RFC 7915 §4.1 fragmentation is done otherwise).
    NeedsFragmentation => "needs_fragmentation",
    /// A fragmented ICMP message (RFC 7915 §1.2: not translated).
    FragmentedIcmp => "fragmented_icmp",
    /// IPv4 UDP with checksum zero that the translator may not complete (RFC 7915 §4.5).
    UdpZeroChecksum => "udp_zero_checksum",
    /// IPv6 UDP with checksum zero (illegal in IPv6 outside RFC 6935 tunnels, RFC 8200
    /// §8.1), not computed (`ipv6_udp_zero_checksum = "drop"`, or a fragment).
    Ipv6UdpZeroChecksum => "ipv6_udp_zero_checksum",
    /// An unexpired IPv4 source route or an IPv6 Routing header with Segments Left.
    SourceRouted => "source_routed",
    /// An ICMP error quoting an ICMP error (RFC 7915 §4.3).
    IcmpErrorAboutError => "icmp_error_about_error",
    /// The buffer had too little room for the translated headers (a runtime defect).
    NoHeadroom => "no_headroom",
    /// ILA: the destination's locator is not the one its identifier is mapped to (a
    /// packet sent before a host moved, or a mapping that differs between routers).
    LocatorMismatch => "locator_mismatch",
    /// IPv4 without DF too big for the next hop, in a mode that does not fragment (NAT44).
    TooBig => "too_big",
    /// An unsolicited inbound TCP SYN, held for a simultaneous open (RFC 5382 REQ-4,
    /// RFC 6146 §3.5.2.2): answered with ICMP Port Unreachable after 6 s unless an
    /// outbound SYN for its connection comes first (then dropped silently).
    SynHeld => "syn_held",
    /// An unsolicited inbound TCP SYN beyond `max_simultaneous_opens` held ones.
    SynHoldFull => "syn_hold_full",
    /// NAT64 `drop_icmpv6_info`: an ICMPv6 informational message (RFC 6146 §3.5.3).
    Icmpv6InfoFiltered => "icmpv6_info_filtered",

    // TCP state tracking.
    /// A TCP RST whose sequence number is outside the window seen for its direction (an
    /// off-path guess): dropped, the session unchanged (see `conntrack::tcp`).
    TcpRstOutOfWindow => "tcp_rst_out_of_window",
}

impl From<xlat::siit::SiitDrop> for DropReason {
    fn from(d: xlat::siit::SiitDrop) -> Self {
        use xlat::siit::SiitDrop as S;
        match d {
            S::Truncated => DropReason::Truncated,
            S::Malformed => DropReason::Malformed,
            S::UnsupportedProtocol => DropReason::UnsupportedProtocol,
            S::IcmpDropped => DropReason::UnsupportedIcmp,
            S::TtlExpired => DropReason::TtlExpired,
            S::FragmentNeeded { .. } => DropReason::FragmentNeeded,
            S::PacketTooBig { .. } => DropReason::PacketTooBig,
            S::NeedsFragmentation => DropReason::NeedsFragmentation,
            S::FragmentedIcmp => DropReason::FragmentedIcmp,
            S::UdpZeroChecksum => DropReason::UdpZeroChecksum,
            S::Ipv6UdpZeroChecksum => DropReason::Ipv6UdpZeroChecksum,
            S::SourceRouted { .. } => DropReason::SourceRouted,
            S::IcmpErrorAboutError => DropReason::IcmpErrorAboutError,
            S::IcmpErrorMalformed => DropReason::IcmpErrorMalformed,
            S::NoHeadroom => DropReason::NoHeadroom,
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// -- one-line explanations for `quicknat stats` (control API) --
impl DropReason {
    /// What the drop means, in one line, for an operator reading `quicknat stats`.
    pub fn explain(self) -> &'static str {
        use DropReason as D;
        match self {
            D::Truncated => "packet shorter than its headers say",
            D::Malformed => "invalid header field (IP version, IHL, length fields)",
            D::BadIpChecksum => "wrong IPv4 header checksum",
            D::NotIpv4 => "not IPv4 where IPv4 is expected",
            D::Fragment => "IPv4 fragment that cannot be tracked (protocol, SCTP, ICMP error, or tiny first fragment)",
            D::FragmentOutOfOrder => "later fragment arrived before its first fragment, not held",
            D::FragmentHeld => "later fragment held until its datagram's first fragment arrives",
            D::FragmentExpired => "held fragment whose first fragment never came",
            D::FragmentHoldFull => "later fragment not held, or pushed out of the full fragment hold",
            D::FragmentOverlap => "overlapping fragment: its datagram refused",
            D::FragmentTooMany => "datagram of more than 64 fragments",
            D::FragmentTableFull => "fragment table full: a new fragmented datagram refused",
            D::UnsupportedProtocol => "transport protocol without ports or identifiers",
            D::AddressOnlyInUse => "another inside host holds this protocol to that remote on the public address",
            D::PptpCallsFull => "PPTP call table full: a control message opening a call refused",
            D::UnsupportedIcmp => "ICMP type neither a tracked query nor a translated error",
            D::TtlExpired => "TTL / hop limit would reach zero at this hop",
            D::NoRule => "outbound from an address no rule covers",
            D::NoMapping => "inbound to a public address and port with no mapping",
            D::Filtered => "a mapping exists but the filtering behaviour refuses this remote",
            D::PoolExhausted => "no free public port for this inside host's paired address",
            D::TableFull => "session table full: new flows refused, existing ones continue",
            D::SubscriberLimit => "inside host at max_sessions_per_host or max_ports_per_host",
            D::IcmpErrorNoSession => "ICMP error quoting a packet of no session",
            D::IcmpErrorMalformed => "ICMP error whose quoted packet cannot be parsed",
            D::WrongDirection => "matched a session from the wrong side (spoofed inside address)",
            D::HairpinDisabled => "inside host addressed a public address while hairpinning is off",
            D::NotIpv6 => "not IPv6 where IPv6 is expected",
            D::NoAddressMapping => "address with no translation (outside Pref64/EAM, or non-global under the WKP)",
            D::FragmentNeeded => "IPv4 with DF too big once translated: answered Fragmentation Needed",
            D::PacketTooBig => "too big for the next hop as IPv6: answered Packet Too Big",
            D::NeedsFragmentation => "IPv4 without DF too big for the IPv6 MTU and not fragmentable",
            D::FragmentedIcmp => "fragmented ICMP message (not translated, RFC 7915)",
            D::UdpZeroChecksum => "IPv4 UDP with checksum zero that may not be completed",
            D::Ipv6UdpZeroChecksum => "IPv6 UDP with checksum zero, not computed",
            D::SourceRouted => "IPv4 source route or IPv6 Routing header with segments left",
            D::IcmpErrorAboutError => "ICMP error quoting an ICMP error",
            D::NoHeadroom => "buffer too small for the translated headers (a runtime defect)",
            D::LocatorMismatch => "ILA destination locator differs from its identifier's mapping",
            D::TooBig => "IPv4 without DF too big for the next hop in a mode that does not fragment",
            D::SynHeld => "unsolicited inbound TCP SYN held for a simultaneous open",
            D::SynHoldFull => "unsolicited inbound TCP SYN beyond max_simultaneous_opens",
            D::Icmpv6InfoFiltered => "ICMPv6 informational message dropped (drop_icmpv6_info)",
            D::TcpRstOutOfWindow => "TCP RST outside the window seen (off-path guess)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_discriminant_order_and_labels_unique() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
        let mut labels: Vec<_> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), DropReason::ALL.len());
    }
}
