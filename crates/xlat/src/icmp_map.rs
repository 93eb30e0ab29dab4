//! ICMP type/code translation tables of SIIT (RFC 7915 §4.2, ICMPv4 to ICMPv6, and §5.2,
//! ICMPv6 to ICMPv4), with the Parameter Problem pointer maps (Figures 3 and 6) and the
//! Packet Too Big / Fragmentation Needed MTU arithmetic.
//!
//! These are pure functions of a few integers: they decide what a message becomes, not how
//! its bytes are rewritten (the translator that owns the packet does that, and the inner
//! quoted packet, checksums and RFC 4884 lengths are its business). They never allocate,
//! never panic on any input (every `u8` pair is answered), and never invent a translation
//! the RFC does not list: anything unlisted is [`IcmpAction::Drop`], which RFC 7915 calls
//! "silently drop" (no ICMP error is sent back about an ICMP message).

/// What to do with an ICMP message when translating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcmpAction<T> {
    /// Translate it into this message.
    Translate(T),
    /// Silently drop it, per the RFC (no ICMP error in reply).
    Drop,
}

/// What besides type and code must change in the ICMP header's second 32-bit word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adjust {
    /// Nothing type-specific: an echo's identifier and sequence are carried over; an
    /// error's word is unused (zero, apart from any RFC 4884 length the caller handles).
    None,
    /// Packet Too Big / Fragmentation Needed: the MTU value must be recomputed, with
    /// [`mtu_4_to_6`] or [`mtu_6_to_4`].
    Mtu,
    /// Parameter Problem: the pointer must be mapped with [`pointer_4_to_6`] or
    /// [`pointer_6_to_4`]; if that gives `None` the message is silently dropped.
    Pointer,
    /// Parameter Problem made from another message: the pointer is set to this fixed
    /// value (ICMPv4 Protocol Unreachable points at the IPv6 Next Header field, offset 6).
    SetPointer(u32),
}

/// The ICMPv6 message an ICMPv4 message becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icmp6Out {
    /// ICMPv6 type.
    pub msg_type: u8,
    /// ICMPv6 code.
    pub code: u8,
    /// What else changes in the header.
    pub adjust: Adjust,
}

/// The ICMPv4 message an ICMPv6 message becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icmp4Out {
    /// ICMPv4 type.
    pub msg_type: u8,
    /// ICMPv4 code.
    pub code: u8,
    /// What else changes in the header.
    pub adjust: Adjust,
}

/// ICMPv4 and ICMPv6 type numbers used by the tables (RFC 792, RFC 4443).
pub mod types {
    /// ICMPv4 Echo Reply.
    pub const V4_ECHO_REPLY: u8 = 0;
    /// ICMPv4 Destination Unreachable.
    pub const V4_DEST_UNREACH: u8 = 3;
    /// ICMPv4 Echo Request.
    pub const V4_ECHO_REQUEST: u8 = 8;
    /// ICMPv4 Time Exceeded.
    pub const V4_TIME_EXCEEDED: u8 = 11;
    /// ICMPv4 Parameter Problem.
    pub const V4_PARAM_PROBLEM: u8 = 12;
    /// ICMPv6 Destination Unreachable.
    pub const V6_DEST_UNREACH: u8 = 1;
    /// ICMPv6 Packet Too Big.
    pub const V6_PACKET_TOO_BIG: u8 = 2;
    /// ICMPv6 Time Exceeded.
    pub const V6_TIME_EXCEEDED: u8 = 3;
    /// ICMPv6 Parameter Problem.
    pub const V6_PARAM_PROBLEM: u8 = 4;
    /// ICMPv6 Echo Request.
    pub const V6_ECHO_REQUEST: u8 = 128;
    /// ICMPv6 Echo Reply.
    pub const V6_ECHO_REPLY: u8 = 129;
}

use types::*;

/// Offset of the Next Header field in the IPv6 header.
const IPV6_NEXT_HEADER: u32 = 6;

fn to6(msg_type: u8, code: u8, adjust: Adjust) -> IcmpAction<Icmp6Out> {
    IcmpAction::Translate(Icmp6Out {
        msg_type,
        code,
        adjust,
    })
}

fn to4(msg_type: u8, code: u8, adjust: Adjust) -> IcmpAction<Icmp4Out> {
    IcmpAction::Translate(Icmp4Out {
        msg_type,
        code,
        adjust,
    })
}

/// ICMPv4 -> ICMPv6 (RFC 7915 §4.2), for a message with type `ty` and code `code`.
pub fn icmp4_to_6(ty: u8, code: u8) -> IcmpAction<Icmp6Out> {
    match ty {
        // "Echo and Echo Reply (Type 8 and Type 0): Adjust the Type values to 128 and 129,
        // respectively, and adjust the ICMP checksum both to take the type change into
        // account and to include the ICMPv6 pseudo-header."
        // The RFC changes only the type, so the code is carried over (it is 0 in any
        // conforming echo).
        V4_ECHO_REQUEST => to6(V6_ECHO_REQUEST, code, Adjust::None),
        V4_ECHO_REPLY => to6(V6_ECHO_REPLY, code, Adjust::None),

        // "Destination Unreachable (Type 3): Translate the Code as described below, set the
        // Type to 1, and adjust the ICMP checksum both to take the type/code change into
        // account and to include the ICMPv6 pseudo-header."
        V4_DEST_UNREACH => match code {
            // "Code 0, 1 (Net Unreachable, Host Unreachable): Set the Code to 0 (No route
            // to destination)."
            0 | 1 => to6(V6_DEST_UNREACH, 0, Adjust::None),
            // "Code 2 (Protocol Unreachable): Translate to an ICMPv6 Parameter Problem
            // (Type 4, Code 1) and make the Pointer point to the IPv6 Next Header field."
            2 => to6(V6_PARAM_PROBLEM, 1, Adjust::SetPointer(IPV6_NEXT_HEADER)),
            // "Code 3 (Port Unreachable): Set the Code to 4 (Port unreachable)."
            3 => to6(V6_DEST_UNREACH, 4, Adjust::None),
            // "Code 4 (Fragmentation Needed and DF was Set): Translate to an ICMPv6 Packet
            // Too Big message (Type 2) with Code set to 0. The MTU field MUST be adjusted
            // for the difference between the IPv4 and IPv6 header sizes [...]" (mtu_4_to_6)
            4 => to6(V6_PACKET_TOO_BIG, 0, Adjust::Mtu),
            // "Code 5 (Source Route Failed): Set the Code to 0 (No route to destination).
            // Note that this error is unlikely since source routes are not translated."
            5 => to6(V6_DEST_UNREACH, 0, Adjust::None),
            // "Code 6, 7, 8: Set the Code to 0 (No route to destination)."
            6..=8 => to6(V6_DEST_UNREACH, 0, Adjust::None),
            // "Code 9, 10 (Communication with Destination Host Administratively
            // Prohibited): Set the Code to 1 (Communication with destination
            // administratively prohibited)."
            9 | 10 => to6(V6_DEST_UNREACH, 1, Adjust::None),
            // "Code 11, 12: Set the Code to 0 (No route to destination)."
            11 | 12 => to6(V6_DEST_UNREACH, 0, Adjust::None),
            // "Code 13 (Communication Administratively Prohibited): Set the Code to 1
            // (Communication with destination administratively prohibited)."
            13 => to6(V6_DEST_UNREACH, 1, Adjust::None),
            // "Code 14 (Host Precedence Violation): Silently drop."
            14 => IcmpAction::Drop,
            // "Code 15 (Precedence cutoff in effect): Set the Code to 1 (Communication with
            // destination administratively prohibited)."
            15 => to6(V6_DEST_UNREACH, 1, Adjust::None),
            // "Other Code values: Silently drop."
            _ => IcmpAction::Drop,
        },

        // "Time Exceeded (Type 11): Set the Type to 3, and adjust the ICMP checksum both to
        // take the type change into account and to include the ICMPv6 pseudo-header. The
        // Code is unchanged."
        // Taken literally: every code is carried over (only 0 and 1 are defined, and they
        // mean the same in both protocols).
        V4_TIME_EXCEEDED => to6(V6_TIME_EXCEEDED, code, Adjust::None),

        // "Parameter Problem (Type 12): Set the Type to 4, and adjust the ICMP checksum both
        // to take the type/code change into account and to include the ICMPv6
        // pseudo-header."
        V4_PARAM_PROBLEM => match code {
            // "Code 0 (Pointer indicates the error): Set the Code to 0 (Erroneous header
            // field encountered) and update the pointer as defined in Figure 3. (If the
            // Original IPv4 Pointer Value is not listed or the Translated IPv6 Pointer
            // Value is listed as "n/a", silently drop the packet.)"
            // "Code 2 (Bad length): Set the Code to 0 (Erroneous header field encountered)
            // and update the pointer as defined in Figure 3. (If the Original IPv4 Pointer
            // Value is not listed or the Translated IPv6 Pointer Value is listed as "n/a",
            // silently drop the packet.)"
            0 | 2 => to6(V6_PARAM_PROBLEM, 0, Adjust::Pointer),
            // "Code 1 (Missing a required option): Silently drop."
            // "Other Code values: Silently drop."
            _ => IcmpAction::Drop,
        },

        // "Information Request/Reply (Type 15 and Type 16): Obsoleted in ICMPv6. Silently
        // drop."
        // "Timestamp and Timestamp Reply (Type 13 and Type 14): Obsoleted in ICMPv6.
        // Silently drop."
        // "Address Mask Request/Reply (Type 17 and Type 18): Obsoleted in ICMPv6. Silently
        // drop."
        // "ICMP Router Advertisement (Type 9): Single-hop message. Silently drop."
        // "ICMP Router Solicitation (Type 10): Single-hop message. Silently drop."
        // "Redirect (Type 5): Single-hop message. Silently drop."
        // "Alternative Host Address (Type 6): Silently drop."
        // "Source Quench (Type 4): Obsoleted in ICMPv6. Silently drop."
        // "Unknown ICMPv4 types: Silently drop."
        _ => IcmpAction::Drop,
    }
}

/// ICMPv6 -> ICMPv4 (RFC 7915 §5.2), for a message with type `ty` and code `code`.
pub fn icmp6_to_4(ty: u8, code: u8) -> IcmpAction<Icmp4Out> {
    match ty {
        // "Echo Request and Echo Reply (Type 128 and Type 129): Adjust the Type values to 8
        // and 0, respectively, and adjust the ICMP checksum both to take the type change
        // into account and to exclude the ICMPv6 pseudo-header."
        // As in §4.2, only the type changes; the code is carried over.
        V6_ECHO_REQUEST => to4(V4_ECHO_REQUEST, code, Adjust::None),
        V6_ECHO_REPLY => to4(V4_ECHO_REPLY, code, Adjust::None),

        // "Destination Unreachable (Type 1) Set the Type to 3, and adjust the ICMP checksum
        // both to take the type/code change into account and to exclude the ICMPv6
        // pseudo-header."
        V6_DEST_UNREACH => match code {
            // "Code 0 (No route to destination): Set the Code to 1 (Host unreachable)."
            0 => to4(V4_DEST_UNREACH, 1, Adjust::None),
            // "Code 1 (Communication with destination administratively prohibited): Set the
            // Code to 10 (Communication with destination host administratively
            // prohibited)."
            1 => to4(V4_DEST_UNREACH, 10, Adjust::None),
            // "Code 2 (Beyond scope of source address): Set the Code to 1 (Host
            // unreachable). Note that this error is very unlikely since an
            // IPv4-translatable source address is typically considered to have global
            // scope."
            2 => to4(V4_DEST_UNREACH, 1, Adjust::None),
            // "Code 3 (Address unreachable): Set the Code to 1 (Host unreachable)."
            3 => to4(V4_DEST_UNREACH, 1, Adjust::None),
            // "Code 4 (Port unreachable): Set the Code to 3 (Port unreachable)."
            4 => to4(V4_DEST_UNREACH, 3, Adjust::None),
            // "Other Code values: Silently drop."
            _ => IcmpAction::Drop,
        },

        // "Packet Too Big (Type 2): Translate to an ICMPv4 Destination Unreachable (Type 3)
        // with Code 4, and adjust the ICMPv4 checksum both to take the type change into
        // account and to exclude the ICMPv6 pseudo-header. The MTU field MUST be adjusted
        // for the difference between the IPv4 and IPv6 header sizes [...]" (mtu_6_to_4)
        // The RFC gives no code rule; PTB defines only code 0, and every code maps alike.
        V6_PACKET_TOO_BIG => to4(V4_DEST_UNREACH, 4, Adjust::Mtu),

        // "Time Exceeded (Type 3): Set the Type to 11, and adjust the ICMPv4 checksum both
        // to take the type change into account and to exclude the ICMPv6 pseudo-header.
        // The Code is unchanged."
        V6_TIME_EXCEEDED => to4(V4_TIME_EXCEEDED, code, Adjust::None),

        // "Parameter Problem (Type 4): Translate the Type and Code as follows, and adjust
        // the ICMPv4 checksum both to take the type/code change into account and to
        // exclude the ICMPv6 pseudo-header."
        V6_PARAM_PROBLEM => match code {
            // "Code 0 (Erroneous header field encountered): Set the Type to 12 (Parameter
            // Problem) and set the Code to 0 (Pointer indicates the error), and update the
            // pointer as defined in Figure 6. (If the Original IPv6 Pointer Value is not
            // listed or the Translated IPv4 Pointer Value is listed as "n/a", silently
            // drop the packet.)"
            0 => to4(V4_PARAM_PROBLEM, 0, Adjust::Pointer),
            // "Code 1 (Unrecognized Next Header type encountered): Translate this to an
            // ICMPv4 protocol unreachable (Type 3, Code 2)."
            // The IPv6 pointer has no place in a Destination Unreachable: the word is
            // unused (Adjust::None).
            1 => to4(V4_DEST_UNREACH, 2, Adjust::None),
            // "Code 2 (Unrecognized IPv6 option encountered): Silently drop."
            // Other codes are not listed; they fall under "Unknown error messages:
            // Silently drop."
            _ => IcmpAction::Drop,
        },

        // "MLD Multicast Listener Query/Report/Done (Type 130, 131, 132): Single-hop
        // message. Silently drop."
        // "Neighbor Discover messages (Type 133 through 137): Single-hop message. Silently
        // drop."
        // "Unknown informational messages: Silently drop."
        // "Unknown error messages: Silently drop."
        _ => IcmpAction::Drop,
    }
}

/// Parameter-problem pointer mapping, IPv4 header offset -> IPv6 header offset (RFC 7915
/// §4.2 Figure 3); `None` means drop.
///
/// ```text
///  IPv4 pointer  IPv4 field               IPv6 pointer  IPv6 field
///  0             Version/IHL              0             Version/Traffic Class
///  1             Type Of Service          1             Traffic Class/Flow Label
///  2,3           Total Length             4             Payload Length
///  4,5           Identification           n/a
///  6             Flags/Fragment Offset    n/a
///  7             Fragment Offset          n/a
///  8             Time to Live             7             Hop Limit
///  9             Protocol                 6             Next Header
///  10,11         Header Checksum          n/a
///  12-15         Source Address           8             Source Address
///  16-19         Destination Address      24            Destination Address
/// ```
pub fn pointer_4_to_6(ptr: u8) -> Option<u8> {
    // "(If the Original IPv4 Pointer Value is not listed or the Translated IPv6 Pointer
    // Value is listed as "n/a", silently drop the packet.)" Options (20 and up) are not
    // listed.
    match ptr {
        0 => Some(0),
        1 => Some(1),
        2 | 3 => Some(4),
        4..=7 => None,
        8 => Some(7),
        9 => Some(6),
        10 | 11 => None,
        12..=15 => Some(8),
        16..=19 => Some(24),
        _ => None,
    }
}

/// Parameter-problem pointer mapping, IPv6 header offset -> IPv4 header offset (RFC 7915
/// §5.2 Figure 6); `None` means drop.
///
/// ```text
///  IPv6 pointer  IPv6 field                IPv4 pointer  IPv4 field
///  0             Version/Traffic Class     0             Version/IHL, Type Of Service
///  1             Traffic Class/Flow Label  1             Type Of Service
///  2,3           Flow Label                n/a
///  4,5           Payload Length            2             Total Length
///  6             Next Header               9             Protocol
///  7             Hop Limit                 8             Time to Live
///  8-23          Source Address            12            Source Address
///  24-39         Destination Address       16            Destination Address
/// ```
pub fn pointer_6_to_4(ptr: u32) -> Option<u8> {
    // "(If the Original IPv6 Pointer Value is not listed or the Translated IPv4 Pointer
    // Value is listed as "n/a", silently drop the packet.)" Extension headers (40 and up)
    // are not listed.
    match ptr {
        0 => Some(0),
        1 => Some(1),
        2 | 3 => None,
        4 | 5 => Some(2),
        6 => Some(9),
        7 => Some(8),
        8..=23 => Some(12),
        24..=39 => Some(16),
        _ => None,
    }
}

/// The IPv6 minimum link MTU (RFC 8200 §5).
pub const IPV6_MIN_MTU: u32 = 1280;

/// IPv6 header minus IPv4 header (without options): 40 - 20.
const HEADER_DIFF: u32 = 20;

/// RFC 1191 §7 Table 7-1 plateaus, largest first.
pub const MTU_PLATEAUS: [u16; 11] = [
    65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68,
];

/// The greatest RFC 1191 plateau below `total_len`, or the smallest plateau (68, the IPv4
/// minimum) when none is below it.
fn plateau_below(total_len: u16) -> u16 {
    MTU_PLATEAUS
        .iter()
        .copied()
        .find(|&p| p < total_len)
        .unwrap_or(68)
}

/// MTU for an ICMPv6 Packet Too Big translated from an ICMPv4 Fragmentation Needed (RFC
/// 7915 §4.2).
///
/// `icmp_mtu` is the Next-Hop MTU the ICMPv4 message carries, `v4_next_hop_mtu` the
/// translator's IPv4-side MTU, `v6_mtu` its IPv6-side MTU, and `total_len_of_original` the
/// Total Length field of the quoted IPv4 packet (used only when `icmp_mtu` is zero).
/// The result is never below [`IPV6_MIN_MTU`]; see the comment inside.
pub fn mtu_4_to_6(
    icmp_mtu: u16,
    v4_next_hop_mtu: u32,
    v6_mtu: u32,
    total_len_of_original: u16,
) -> u32 {
    // RFC 7915 §4.2: "Note that if the IPv4 router set the MTU field to zero, i.e., the
    // router does not implement [RFC1191], then the translator MUST use the plateau values
    // specified in [RFC1191] to determine a likely path MTU and include that path MTU in
    // the ICMPv6 packet. (Use the greatest plateau value that is less than the returned
    // Total Length field.)"
    let advertised = match icmp_mtu {
        0 => plateau_below(total_len_of_original),
        m => m,
    };
    // "The MTU field MUST be adjusted for the difference between the IPv4 and IPv6 header
    // sizes, i.e., minimum(advertised MTU+20, MTU_of_IPv6_nexthop,
    // (MTU_of_IPv4_nexthop)+20)."
    let mtu = (u32::from(advertised) + HEADER_DIFF)
        .min(v6_mtu)
        .min(v4_next_hop_mtu.saturating_add(HEADER_DIFF));
    // Not in RFC 7915's formula (our choice, as Jool's): never advertise less than 1280.
    // RFC 8201 §4: "If a node receives a Packet Too Big message reporting a next-hop MTU
    // that is less than the IPv6 minimum link MTU, it must discard it." A PTB of 1280 is
    // acted on, and the IPv4 packets it yields (<= 1260 bytes) go out with DF clear (RFC
    // 7915 §5.1) so IPv4 routers may fragment them.
    mtu.max(IPV6_MIN_MTU)
}

/// MTU for an ICMPv4 Fragmentation Needed translated from an ICMPv6 Packet Too Big (RFC
/// 7915 §5.2).
///
/// `ptb_mtu` is the MTU the PTB carries, `v4_mtu` the translator's IPv4-side MTU, `v6_mtu`
/// its IPv6-side MTU. The result saturates at 0 and at 65535.
///
/// RFC 7915 §5.2: "The MTU field MUST be adjusted for the difference between the IPv4 and
/// IPv6 header sizes, taking into account whether or not the packet in error includes a
/// Fragment Header, i.e., minimum(advertised MTU-20, MTU_of_IPv4_nexthop,
/// (MTU_of_IPv6_nexthop)-20)." This implements the formula as written. When the quoted
/// IPv6 packet carries a Fragment Header (the IPv4 sender did not set DF, so its packets
/// grow by 28 bytes, not 20), the caller should pass `ptb_mtu - 8` to account for it.
pub fn mtu_6_to_4(ptb_mtu: u32, v4_mtu: u32, v6_mtu: u32) -> u16 {
    let mtu = ptb_mtu
        .saturating_sub(HEADER_DIFF)
        .min(v4_mtu)
        .min(v6_mtu.saturating_sub(HEADER_DIFF));
    u16::try_from(mtu).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Adjust::{Mtu, Pointer, SetPointer};

    const N: Adjust = Adjust::None;

    /// ((input type, input code), (output type, output code, adjust)).
    type Row = ((u8, u8), (u8, u8, Adjust));

    /// Every ICMPv4 (type, code) the RFC translates, and what it becomes. Anything not
    /// listed here must be dropped (checked by the sweep).
    fn table_4_to_6() -> Vec<Row> {
        let mut t = vec![
            ((3, 0), (1, 0, N)),
            ((3, 1), (1, 0, N)),
            ((3, 2), (4, 1, SetPointer(6))),
            ((3, 3), (1, 4, N)),
            ((3, 4), (2, 0, Mtu)),
            ((3, 5), (1, 0, N)),
            ((3, 6), (1, 0, N)),
            ((3, 7), (1, 0, N)),
            ((3, 8), (1, 0, N)),
            ((3, 9), (1, 1, N)),
            ((3, 10), (1, 1, N)),
            ((3, 11), (1, 0, N)),
            ((3, 12), (1, 0, N)),
            ((3, 13), (1, 1, N)),
            // (3, 14) host precedence violation: dropped.
            ((3, 15), (1, 1, N)),
            ((12, 0), (4, 0, Pointer)),
            // (12, 1) missing a required option: dropped.
            ((12, 2), (4, 0, Pointer)),
        ];
        for code in 0..=255u8 {
            // Echo: only the type changes. Time Exceeded: "The Code is unchanged."
            t.push(((8, code), (128, code, N)));
            t.push(((0, code), (129, code, N)));
            t.push(((11, code), (3, code, N)));
        }
        t
    }

    /// Every ICMPv6 (type, code) the RFC translates, and what it becomes.
    fn table_6_to_4() -> Vec<Row> {
        let mut t = vec![
            ((1, 0), (3, 1, N)),
            ((1, 1), (3, 10, N)),
            ((1, 2), (3, 1, N)),
            ((1, 3), (3, 1, N)),
            ((1, 4), (3, 3, N)),
            ((4, 0), (12, 0, Pointer)),
            ((4, 1), (3, 2, N)),
            // (4, 2) unrecognized IPv6 option: dropped.
        ];
        for code in 0..=255u8 {
            t.push(((128, code), (8, code, N)));
            t.push(((129, code), (0, code, N)));
            t.push(((2, code), (3, 4, Mtu)));
            t.push(((3, code), (11, code, N)));
        }
        t
    }

    #[test]
    fn every_row_4_to_6() {
        for ((ty, code), (t6, c6, adjust)) in table_4_to_6() {
            assert_eq!(
                icmp4_to_6(ty, code),
                IcmpAction::Translate(Icmp6Out {
                    msg_type: t6,
                    code: c6,
                    adjust
                }),
                "ICMPv4 {ty}/{code}"
            );
        }
    }

    #[test]
    fn every_row_6_to_4() {
        for ((ty, code), (t4, c4, adjust)) in table_6_to_4() {
            assert_eq!(
                icmp6_to_4(ty, code),
                IcmpAction::Translate(Icmp4Out {
                    msg_type: t4,
                    code: c4,
                    adjust
                }),
                "ICMPv6 {ty}/{code}"
            );
        }
    }

    #[test]
    fn named_drops() {
        // §4.2: source quench, redirect, alternative host address, router adv/sol,
        // timestamp, information, address mask; dest unreach 14 and 16+; param prob 1.
        for ty in [4, 5, 6, 9, 10, 13, 14, 15, 16, 17, 18] {
            assert_eq!(icmp4_to_6(ty, 0), IcmpAction::Drop, "ICMPv4 type {ty}");
        }
        for (ty, code) in [(3, 14), (3, 16), (3, 255), (12, 1), (12, 3), (12, 255)] {
            assert_eq!(icmp4_to_6(ty, code), IcmpAction::Drop, "ICMPv4 {ty}/{code}");
        }
        // §5.2: MLD and ND (single hop), unknown dest unreach codes, param prob 2.
        for ty in 130..=137 {
            assert_eq!(icmp6_to_4(ty, 0), IcmpAction::Drop, "ICMPv6 type {ty}");
        }
        for (ty, code) in [(1, 5), (1, 6), (1, 255), (4, 2), (4, 3), (4, 255)] {
            assert_eq!(icmp6_to_4(ty, code), IcmpAction::Drop, "ICMPv6 {ty}/{code}");
        }
    }

    /// All 65536 pairs each way: no panic, and exactly the listed rows translate.
    #[test]
    fn sweep_every_pair() {
        let t46: std::collections::HashMap<_, _> = table_4_to_6().into_iter().collect();
        let t64: std::collections::HashMap<_, _> = table_6_to_4().into_iter().collect();
        let mut translated = (0, 0);
        for ty in 0..=255u8 {
            for code in 0..=255u8 {
                match (icmp4_to_6(ty, code), t46.get(&(ty, code))) {
                    (IcmpAction::Drop, None) => {}
                    (IcmpAction::Translate(o), Some(&(t, c, a))) => {
                        assert_eq!((o.msg_type, o.code, o.adjust), (t, c, a));
                        translated.0 += 1;
                    }
                    (got, want) => panic!("ICMPv4 {ty}/{code}: got {got:?}, want {want:?}"),
                }
                match (icmp6_to_4(ty, code), t64.get(&(ty, code))) {
                    (IcmpAction::Drop, None) => {}
                    (IcmpAction::Translate(o), Some(&(t, c, a))) => {
                        assert_eq!((o.msg_type, o.code, o.adjust), (t, c, a));
                        translated.1 += 1;
                    }
                    (got, want) => panic!("ICMPv6 {ty}/{code}: got {got:?}, want {want:?}"),
                }
                // Unknown types always drop.
                if !matches!(ty, 0 | 3 | 8 | 11 | 12) {
                    assert_eq!(icmp4_to_6(ty, code), IcmpAction::Drop);
                }
                if !matches!(ty, 1..=4 | 128 | 129) {
                    assert_eq!(icmp6_to_4(ty, code), IcmpAction::Drop);
                }
            }
        }
        assert_eq!(translated, (15 + 2 + 3 * 256, 7 + 4 * 256));
    }

    #[test]
    fn pointer_figure_3() {
        let expected: [Option<u8>; 20] = [
            Some(0),
            Some(1),
            Some(4),
            Some(4),
            None,
            None,
            None,
            None,
            Some(7),
            Some(6),
            None,
            None,
            Some(8),
            Some(8),
            Some(8),
            Some(8),
            Some(24),
            Some(24),
            Some(24),
            Some(24),
        ];
        for p in 0..=255u8 {
            let want = expected.get(usize::from(p)).copied().flatten();
            assert_eq!(pointer_4_to_6(p), want, "IPv4 pointer {p}");
        }
    }

    #[test]
    fn pointer_figure_6() {
        let mut expected = vec![
            Some(0),
            Some(1),
            None,
            None,
            Some(2),
            Some(2),
            Some(9),
            Some(8),
        ];
        expected.extend([Some(12); 16]);
        expected.extend([Some(16); 16]);
        assert_eq!(expected.len(), 40);
        for p in 0..=1000u32 {
            let want = expected.get(p as usize).copied().flatten();
            assert_eq!(pointer_6_to_4(p), want, "IPv6 pointer {p}");
        }
        assert_eq!(pointer_6_to_4(u32::MAX), None);
    }

    #[test]
    fn pointers_round_trip_where_both_listed() {
        // A field's first octet maps to the other header and back to the same field.
        for p4 in 0..20u8 {
            if let Some(p6) = pointer_4_to_6(p4) {
                let back = pointer_6_to_4(u32::from(p6)).unwrap();
                assert_eq!(pointer_4_to_6(back), Some(p6), "IPv4 pointer {p4}");
            }
        }
    }

    #[test]
    fn mtu_4_to_6_rules() {
        // minimum(advertised MTU+20, MTU_of_IPv6_nexthop, MTU_of_IPv4_nexthop+20)
        assert_eq!(mtu_4_to_6(1400, 1500, 1500, 1500), 1420);
        assert_eq!(mtu_4_to_6(1480, 1500, 1500, 1500), 1500); // 1500 = 1480 + 20 = v6 MTU
        assert_eq!(mtu_4_to_6(1480, 1500, 1450, 1500), 1450); // IPv6 next hop smallest
        assert_eq!(mtu_4_to_6(9000, 1400, 9000, 9000), 1420); // IPv4 next hop smallest
        assert_eq!(mtu_4_to_6(65535, u32::MAX, u32::MAX, 65535), 65555);
        // Never below the IPv6 minimum link MTU.
        assert_eq!(mtu_4_to_6(576, 1500, 1500, 1500), 1280);
        assert_eq!(mtu_4_to_6(1260, 1500, 1500, 1500), 1280);
        assert_eq!(mtu_4_to_6(1261, 1500, 1500, 1500), 1281);
        assert_eq!(mtu_4_to_6(1400, 0, 0, 1500), 1280);
    }

    #[test]
    fn mtu_4_to_6_zero_uses_plateaus() {
        // "Use the greatest plateau value that is less than the returned Total Length."
        assert_eq!(mtu_4_to_6(0, u32::MAX, u32::MAX, 65535), 32000 + 20);
        assert_eq!(mtu_4_to_6(0, u32::MAX, u32::MAX, 32001), 32000 + 20);
        assert_eq!(mtu_4_to_6(0, u32::MAX, u32::MAX, 32000), 17914 + 20);
        assert_eq!(mtu_4_to_6(0, u32::MAX, u32::MAX, 9000), 8166 + 20);
        assert_eq!(mtu_4_to_6(0, u32::MAX, u32::MAX, 4353), 4352 + 20);
        assert_eq!(mtu_4_to_6(0, 9000, 9000, 4000), 2002 + 20);
        assert_eq!(mtu_4_to_6(0, 9000, 9000, 1500), 1492 + 20);
        assert_eq!(mtu_4_to_6(0, 9000, 9000, 1493), 1492 + 20);
        assert_eq!(mtu_4_to_6(0, 9000, 9000, 1492), 1280); // 1006 + 20, raised to 1280
        assert_eq!(mtu_4_to_6(0, 1500, 1500, 68), 1280);
        assert_eq!(mtu_4_to_6(0, 1500, 1500, 0), 1280);
        // The translator's own MTUs still bound the plateau.
        assert_eq!(mtu_4_to_6(0, 1400, 1500, 1500), 1420);
        assert_eq!(plateau_below(0), 68);
        assert_eq!(plateau_below(69), 68);
        assert_eq!(plateau_below(297), 296);
        assert_eq!(plateau_below(u16::MAX), 32000);
    }

    #[test]
    fn mtu_6_to_4_rules() {
        // minimum(advertised MTU-20, MTU_of_IPv4_nexthop, MTU_of_IPv6_nexthop-20)
        assert_eq!(mtu_6_to_4(1280, 1500, 1500), 1260);
        assert_eq!(mtu_6_to_4(1500, 1500, 1500), 1480);
        assert_eq!(mtu_6_to_4(9000, 1400, 9000), 1400);
        assert_eq!(mtu_6_to_4(9000, 9000, 1400), 1380);
        assert_eq!(mtu_6_to_4(u32::MAX, u32::MAX, u32::MAX), u16::MAX);
        assert_eq!(mtu_6_to_4(10, 1500, 1500), 0);
        assert_eq!(mtu_6_to_4(1500, 1500, 0), 0);
    }
}
