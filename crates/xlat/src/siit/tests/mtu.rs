//! The two MTUs of RFC 7915 §4.1 (next hop for DF, lowest IPv6 MTU without), §4.2's and
//! §5.2's MTU formulas with the plateau rule, §5.1's DF rule and its operator choices,
//! and the TOS / Traffic Class settings. Expected values are worked out from the RFC text
//! quoted beside each case.

use super::*;

/// Both links 1500 (an Ethernet gateway), lowest IPv6 MTU at its default of 1280.
fn links1500() -> SiitOptions {
    SiitOptions {
        ipv6_mtu: 1500,
        ipv4_mtu: 1500,
        ..opts()
    }
}

/// An IPv4 UDP packet of exactly `total` bytes, DF as given.
fn udp4(total: usize, df: bool) -> Vec<u8> {
    let (s4, _) = seg_pair(17, &udp(1, 2, &vec![0x5a; total - 28]));
    let mut h = h4(17);
    h.df = df;
    ipv4(h, &[], &s4)
}

/// An IPv6 UDP packet whose IPv4 translation is `total4` bytes, with a Fragment header
/// (offset 0, M set) when `frag`.
fn udp6(total4: usize, frag: bool) -> Vec<u8> {
    let (_, s6v) = seg_pair(17, &udp(1, 2, &vec![0x5a; total4 - 28]));
    if frag {
        let mut rest = frag6(17, 0, true, 0xabcd_0042);
        rest.extend_from_slice(&s6v);
        ipv6(0, 44, 9, s6(), d6(), &rest)
    } else {
        ipv6(0, 17, 9, s6(), d6(), &s6v)
    }
}

#[test]
fn a_df_packet_is_held_to_the_next_hop_ipv6_mtu_not_the_lowest() {
    // A DF-set 1328-byte IPv4 packet, 1500-byte links. RFC 7915 §4.1: Fragmentation Needed
    // only "if ... the MTU of the next-hop interface is less than the total length value of
    // the IPv4 packet plus 20": 1500 >= 1348, so it passes whole, without a Fragment header
    // ("the translator SHOULD NOT add a Fragment Header").
    let out = run46(&udp4(1328, true), HEAD, &links1500()).unwrap();
    assert_eq!(out.len(), 1348);
    assert_eq!(out[6], 17, "no Fragment header");
    // Boundary at a 1400-byte next hop: 1380 + 20 fits; 1381 + 20 does not, and the
    // sender is told 1400 - 20 = 1380.
    let o = SiitOptions {
        ipv6_mtu: 1400,
        ..links1500()
    };
    assert_eq!(run46(&udp4(1380, true), HEAD, &o).unwrap().len(), 1400);
    assert_eq!(
        run46(&udp4(1381, true), HEAD, &o),
        Err(SiitDrop::FragmentNeeded { mtu: 1380 })
    );
    // The precheck (NAT64's) agrees.
    assert_eq!(ipv4_precheck(&udp4(1328, true), &links1500()), Ok(()));
    assert_eq!(
        ipv4_precheck(&udp4(1381, true), &o),
        Err(SiitDrop::FragmentNeeded { mtu: 1380 })
    );
}

#[test]
fn a_packet_without_df_is_held_to_the_lowest_ipv6_mtu() {
    // RFC 7915 §4.1: "If the DF flag is not set and the IPv4 packet will result in an
    // IPv6 packet larger than ... "lowest-ipv6-mtu" and defaulting to 1280 bytes), the
    // packet SHOULD be fragmented". 1260 + 20 = 1280 fits; 1261 does not, even with a
    // 1500-byte next hop.
    let o = links1500();
    assert_eq!(run46(&udp4(1260, false), HEAD, &o).unwrap().len(), 1280);
    assert_eq!(
        run46(&udp4(1261, false), HEAD, &o),
        Err(SiitDrop::NeedsFragmentation)
    );
    // "The translator MAY provide a configuration function for the network administrator
    // to adjust the threshold of the minimum IPv6 MTU to a value greater than 1280-byte".
    let o = SiitOptions {
        lowest_ipv6_mtu: 1500,
        ..links1500()
    };
    assert_eq!(run46(&udp4(1480, false), HEAD, &o).unwrap().len(), 1500);
    assert_eq!(
        run46(&udp4(1481, false), HEAD, &o),
        Err(SiitDrop::NeedsFragmentation)
    );
    // Never beyond the next hop: a lowest MTU above it is capped by it.
    let o = SiitOptions {
        lowest_ipv6_mtu: 1500,
        ipv6_mtu: 1300,
        ..links1500()
    };
    assert_eq!(o.ipv6_fragment_mtu(), 1300);
    assert_eq!(
        run46(&udp4(1281, false), HEAD, &o),
        Err(SiitDrop::NeedsFragmentation)
    );
}

/// The MTU of the Packet Too Big that an ICMPv4 Fragmentation Needed carrying `mtu`
/// (about a quoted packet of Total Length `quoted_total`) becomes under `o`.
fn ptb_from_frag_needed(mtu: u16, quoted_total: u16, o: &SiitOptions) -> u32 {
    let (mut q4, _) = quoted_udp(b"big");
    // The Total Length the quoted header claims (the plateau rule reads it); the quote
    // itself stays short, as routers cut it.
    q4[2..4].copy_from_slice(&quoted_total.to_be_bytes());
    q4[10..12].fill(0);
    let c = naive(&[&q4[..20]]);
    q4[10..12].copy_from_slice(&c.to_be_bytes());
    let mut m4 = icmp_err(3, 4, u32::from(mtu), &q4);
    fill(&mut m4, 1, None);
    let out = run46(&ipv4(h4(1), &[], &m4), HEAD, o).unwrap();
    assert_eq!((out[40], out[41]), (2, 0), "Packet Too Big");
    u32::from_be_bytes([out[44], out[45], out[46], out[47]])
}

#[test]
fn fragmentation_needed_becomes_packet_too_big_by_the_section_4_2_formula() {
    // RFC 7915 §4.2: "minimum(advertised MTU+20, MTU_of_IPv6_nexthop,
    // (MTU_of_IPv4_nexthop)+20)": 1261 with 1500-byte links -> 1281.
    let o = links1500();
    assert_eq!(ptb_from_frag_needed(1261, 1400, &o), 1281);
    // Each term of the minimum in turn.
    let o = SiitOptions {
        ipv6_mtu: 1300,
        ..links1500()
    };
    assert_eq!(ptb_from_frag_needed(1400, 1500, &o), 1300);
    let o = SiitOptions {
        ipv4_mtu: 1270,
        ..links1500()
    };
    assert_eq!(ptb_from_frag_needed(1400, 1500, &o), 1290);
    // The lowest IPv6 MTU plays no part in it.
    let o = SiitOptions {
        lowest_ipv6_mtu: 1400,
        ..links1500()
    };
    assert_eq!(ptb_from_frag_needed(1300, 1500, &o), 1320);
}

#[test]
fn an_mtu_of_zero_takes_the_plateau_below_the_quoted_total_length() {
    // RFC 7915 §4.2: "if the IPv4 router set the MTU field to zero ... the translator MUST
    // use the plateau values specified in [RFC1191] ... (Use the greatest plateau value
    // that is less than the returned Total Length field.)" RFC 1191's plateaus include
    // 1492, 2002 and 8166.
    let jumbo = SiitOptions {
        ipv6_mtu: 9000,
        ipv4_mtu: 9000,
        ..opts()
    };
    assert_eq!(ptb_from_frag_needed(0, 1500, &jumbo), 1492 + 20);
    assert_eq!(ptb_from_frag_needed(0, 4000, &jumbo), 2002 + 20);
    assert_eq!(ptb_from_frag_needed(0, 9000, &jumbo), 8166 + 20);
    // Still capped by the next hops (1500 + 20, 1500).
    assert_eq!(ptb_from_frag_needed(0, 9000, &links1500()), 1500);
    // A plateau below 1260 (1006 for 1200) would mean a PTB below the IPv6 minimum,
    // which IPv6 hosts discard (RFC 8201 §4): 1280 is reported instead.
    assert_eq!(ptb_from_frag_needed(0, 1200, &links1500()), 1280);
}

/// The MTU of the Fragmentation Needed that an ICMPv6 Packet Too Big carrying `mtu`
/// becomes under `o` (the quoted packet with a Fragment header when `frag`).
fn frag_needed_from_ptb(mtu: u32, frag: bool, o: &SiitOptions) -> u32 {
    let (_, q6) = quoted_udp(b"big");
    let q6 = if frag {
        // The same quoted packet with a Fragment header after its IPv6 header.
        let mut rest = frag6(17, 0, true, 7);
        rest.extend_from_slice(&q6[40..]);
        ipv6(0, 44, 3, d6(), s6(), &rest)
    } else {
        q6
    };
    let mut m6 = icmp_err(2, 0, mtu, &q6);
    fill6(&mut m6, 58, s6(), d6());
    let out = run64(&ipv6(0, 58, 64, s6(), d6(), &m6), o).unwrap();
    assert_eq!((out[20], out[21]), (3, 4), "Fragmentation Needed");
    u32::from_be_bytes([out[24], out[25], out[26], out[27]])
}

#[test]
fn packet_too_big_becomes_fragmentation_needed_by_the_section_5_2_formula() {
    // RFC 7915 §5.2: "minimum(advertised MTU-20, MTU_of_IPv4_nexthop,
    // (MTU_of_IPv6_nexthop)-20)", "taking into account whether or not the packet in error
    // includes a Fragment Header" (8 bytes more per packet).
    let o = links1500();
    assert_eq!(frag_needed_from_ptb(1400, false, &o), 1380);
    assert_eq!(frag_needed_from_ptb(1400, true, &o), 1372);
    let o = SiitOptions {
        ipv4_mtu: 1300,
        ..links1500()
    };
    assert_eq!(frag_needed_from_ptb(1400, false, &o), 1300);
    let o = SiitOptions {
        ipv6_mtu: 1350,
        ..links1500()
    };
    assert_eq!(frag_needed_from_ptb(1400, false, &o), 1330);
}

#[test]
fn df_follows_the_1260_byte_rule_or_the_operators_choice() {
    // RFC 7915 §5.1: "If the size of the translated IPv4 packet is less than or equal to
    // 1260 bytes, it is set to zero; otherwise, it is set to one."
    let df = |p: &[u8]| p[6] & 0x40 != 0;
    let o = links1500();
    assert!(!df(&run64(&udp6(1260, false), &o).unwrap()));
    assert!(df(&run64(&udp6(1261, false), &o).unwrap()));
    // A Fragment header means DF clear whatever the size (§5.1.1).
    assert!(!df(&run64(&udp6(1400, true), &o).unwrap()));
    // Always clear: a big packet goes out fragmentable, with a varying Identification.
    let clear = SiitOptions {
        df: DfPolicy::Clear,
        ..links1500()
    };
    let out = run64(&udp6(1400, false), &clear).unwrap();
    assert!(!df(&out));
    assert_ne!(u16::from_be_bytes([out[4], out[5]]), 0);
    // Always set: even a small one has DF (and, atomic, Identification 0).
    let set = SiitOptions {
        df: DfPolicy::Set,
        ..links1500()
    };
    let out = run64(&udp6(100, false), &set).unwrap();
    assert!(df(&out));
    assert_eq!(&out[4..6], &[0, 0]);
    assert!(!df(&run64(&udp6(100, true), &set).unwrap()));
}

#[test]
fn too_big_for_the_ipv4_next_hop_packet_too_big_with_df_fragmentation_without() {
    let o = SiitOptions {
        ipv4_mtu: 1400,
        ..links1500()
    };
    // DF to be set: RFC 7915 §5.2's "(MTU_of_IPv4_nexthop)+20" as the sender counts it.
    assert_eq!(run64(&udp6(1400, false), &o).unwrap().len(), 1400);
    let p = udp6(1401, false);
    assert_eq!(run64(&p, &o), Err(SiitDrop::PacketTooBig { mtu: 1420 }));
    // An IPv6 fragment gets DF clear ("allowing this packet to be further fragmented by
    // IPv4 routers", §5.1.1): the translator may fragment it; refused as it arrived so the
    // caller can.
    let p = udp6(1401, true);
    let mut b = p.clone();
    let v = ipv6_to_ipv4(&mut b, 0, p.len(), S4, D4, &inner64, &Seq::default(), &o);
    assert_eq!(v, SiitVerdict::Drop(SiitDrop::NeedsFragmentation));
    assert_eq!(b, p, "left as it arrived");
    // Same with DF always clear.
    let clear = SiitOptions {
        df: DfPolicy::Clear,
        ..o
    };
    assert_eq!(
        run64(&udp6(1401, false), &clear),
        Err(SiitDrop::NeedsFragmentation)
    );
    // An IPv4 next hop below 1260: never a PTB below the IPv6 minimum (RFC 8200 §5).
    let small = SiitOptions {
        ipv4_mtu: 576,
        ..links1500()
    };
    assert_eq!(
        run64(&udp6(1300, false), &small),
        Err(SiitDrop::PacketTooBig { mtu: 1280 })
    );
    assert_eq!(
        run64(&udp6(1000, false), &small),
        Err(SiitDrop::NeedsFragmentation)
    );
}

#[test]
fn tos_and_traffic_class_copied_or_set() {
    // RFC 7915 §4.1: "Traffic Class: By default, copied from the IP Type Of Service (TOS)
    // octet"; §5.1: "SHOULD provide the ability to ... always set the IPv4 TOS Octet to a
    // specified value".
    let o = links1500();
    let v6 = run46(&udp4(100, true), HEAD, &o).unwrap();
    let tc = |p: &[u8]| ((p[0] & 0x0f) << 4) | (p[1] >> 4);
    assert_eq!(tc(&v6), 0xB8);
    let set = SiitOptions {
        traffic_class: Some(0x28),
        tos: Some(0x48),
        ..o
    };
    assert_eq!(tc(&run46(&udp4(100, true), HEAD, &set).unwrap()), 0x28);
    let mut p6 = udp6(100, false);
    p6[0] = 0x6B;
    p6[1] = 0x80; // Traffic Class 0xB8
    assert_eq!(run64(&p6, &o).unwrap()[1], 0xB8);
    assert_eq!(run64(&p6, &set).unwrap()[1], 0x48);
    let zero = SiitOptions {
        tos_to_traffic_class: false,
        ..o
    };
    assert_eq!(run64(&p6, &zero).unwrap()[1], 0);
    assert_eq!(tc(&run46(&udp4(100, true), HEAD, &zero).unwrap()), 0);
}
