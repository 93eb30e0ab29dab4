//! Every key of the configuration file, section by section: type, default, allowed values,
//! what a reload does with it, and what it means. The tests beside this file hold the table
//! to the parser (every key the parser accepts is here and nothing else), to the defaults
//! (writing a key at its stated default changes nothing) and to the reload path (a key
//! marked `live` changes live, one marked `restart` is refused).

use super::{Default::*, Key, Reload::*, Section};

/// `Key` with the reload behaviour of its section.
const fn k(
    name: &'static str,
    ty: &'static str,
    default: super::Default,
    allowed: &'static str,
    meaning: &'static str,
    example: &'static str,
) -> Key {
    Key {
        name,
        ty,
        default,
        allowed,
        meaning,
        rfc: "",
        example,
        reload: None,
    }
}

impl Key {
    /// The RFC (and section or requirement) the key implements.
    const fn rfc(mut self, rfc: &'static str) -> Key {
        self.rfc = rfc;
        self
    }

    /// A reload behaviour other than its section's.
    const fn reload(mut self, r: super::Reload) -> Key {
        self.reload = Some(r);
        self
    }
}

const SECS: &str = "integer (seconds)";

/// `fragment_hold_bytes`, the same in `[nat44]` and `[nat64]`.
const FRAGMENT_HOLD_BYTES: Key = k(
    "fragment_hold_bytes",
    "integer",
    Value("4194304"),
    "0-1073741824",
    "Bytes of later fragments held at most while they wait for their datagram's first \
     fragment (a sixteenth per source); 0 drops a fragment that arrives before its first.",
    "1048576",
)
.rfc("RFC 4787 REQ-14")
.reload(Restart);

/// The sections in the order the reference shows them.
#[rustfmt::skip]
pub const SECTIONS: &[Section] = &[
    Section {
        name: "gateway",
        array: false,
        about: "The live gateway: the interface pair it translates between, the packet I/O \
                backend, threads, the control socket, metrics and logs. Needed by `quicknat \
                run`; `translate` reads only its addresses and MTUs.",
        modes: "every mode",
        reload: Restart,
        base: "[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n\n\
               [gateway]\ninside = \"in0\"\noutside = \"out0\"\n@\n",
        keys: GATEWAY,
    },
    Section {
        name: "nat44",
        array: false,
        about: "NAT44 (NAPT, carrier-grade NAT): the default mode when no other mode's \
                section is present.",
        modes: "NAT44",
        reload: Live,
        base: "[nat44]\n@\n\n[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n",
        keys: NAT44,
    },
    Section {
        name: "nat44.timeouts",
        array: false,
        about: "Idle timeouts of NAT44 sessions, in seconds. A change applies to existing \
                sessions at their next check.",
        modes: "NAT44",
        reload: Live,
        base: "[nat44.timeouts]\n@\n\n[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n",
        keys: TIMEOUTS,
    },
    Section {
        name: "nat44.rule",
        array: true,
        about: "A dynamic rule: inside hosts in `inside` are translated to addresses of \
                `pool` (paired pooling: one inside host, one public address). The most \
                specific rule covering a source applies.",
        modes: "NAT44",
        reload: Live,
        base: "[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n@\n",
        keys: NAT44_RULES,
    },
    Section {
        name: "nat44.static",
        array: true,
        about: "A one-to-one static NAT: an inside address always appears as one public \
                address, every port, both directions.",
        modes: "NAT44",
        reload: Live,
        base: "[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n\n\
               [[nat44.static]]\ninside = \"10.0.1.5\"\npublic = \"203.0.113.100\"\n@\n",
        keys: NAT44_STATIC,
    },
    Section {
        name: "nat44.forward",
        array: true,
        about: "A port forward: a public address and port sent to an inside server.",
        modes: "NAT44",
        reload: Live,
        base: "[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n\n\
               [[nat44.forward]]\nprotocol = \"tcp\"\npublic = \"203.0.113.1:8080\"\n\
               inside = \"10.0.0.5:80\"\n@\n",
        keys: NAT44_FORWARD,
    },
    Section {
        name: "nat44.deterministic",
        array: false,
        about: "Deterministic NAT (RFC 7422): each subscriber address of `inside` gets a \
                fixed public address and port range of `outside`, computable offline \
                (`quicknat det`), so no per-session log is needed.",
        modes: "NAT44",
        reload: Restart,
        base: "[nat44.deterministic]\ninside = \"100.64.0.0/24\"\noutside = \"203.0.113.0/28\"\n@\n",
        keys: NAT44_DETERMINISTIC,
    },
    Section {
        name: "nat64",
        array: false,
        about: "Stateful NAT64 (RFC 6146): IPv6-only hosts reach IPv4 servers at addresses \
                synthesized from `pref64` (RFC 6052), translated to `pool4`.",
        modes: "NAT64",
        reload: Live,
        base: "[nat64]\npool4 = \"203.0.113.0/28\"\n@\n",
        keys: NAT64,
    },
    Section {
        name: "nat64.timeouts",
        array: false,
        about: "Idle timeouts of NAT64 sessions, in seconds (the same keys as \
                `[nat44.timeouts]`).",
        modes: "NAT64",
        reload: Live,
        base: "[nat64]\npool4 = \"203.0.113.0/28\"\n\n[nat64.timeouts]\n@\n",
        keys: TIMEOUTS,
    },
    Section {
        name: "nat64.static",
        array: true,
        about: "A static binding (BIB entry): a public pool4 address and port sent to an \
                IPv6 server.",
        modes: "NAT64",
        reload: Restart,
        base: "[nat64]\npool4 = \"203.0.113.0/28\"\n\n[[nat64.static]]\nprotocol = \"tcp\"\n\
               public = \"203.0.113.1:80\"\ninside = \"[2001:db8::80]:80\"\n@\n",
        keys: NAT64_STATIC,
    },
    Section {
        name: "nat64.options",
        array: false,
        about: "The RFC 7915 header translation settings of NAT64 (the same keys as \
                `[siit.options]`).",
        modes: "NAT64",
        reload: Restart,
        base: "[nat64]\npool4 = \"203.0.113.0/28\"\n\n[nat64.options]\n@\n",
        keys: XLAT_OPTIONS,
    },
    Section {
        name: "siit",
        array: false,
        about: "Stateless IP/ICMP translation (SIIT, RFC 7915): IPv4 and IPv6 addresses \
                mapped by `pref64` (RFC 6052) and explicit address mappings (RFC 7757).",
        modes: "SIIT",
        reload: Live,
        base: "[siit]\npref64 = \"64:ff9b::/96\"\n@\n",
        keys: SIIT,
    },
    Section {
        name: "siit.eam",
        array: true,
        about: "An explicit address mapping (RFC 7757): an IPv4 prefix and an IPv6 prefix of \
                the same suffix length, mapped address by address.",
        modes: "SIIT",
        reload: Live,
        base: "[siit]\npref64 = \"64:ff9b::/96\"\n\n[[siit.eam]]\nipv4 = \"192.0.2.0/24\"\n\
               ipv6 = \"2001:db8:4::/120\"\n@\n",
        keys: SIIT_EAM,
    },
    Section {
        name: "siit.options",
        array: false,
        about: "The RFC 7915 header translation settings of SIIT.",
        modes: "SIIT",
        reload: Live,
        base: "[siit]\npref64 = \"64:ff9b::/96\"\n\n[siit.options]\n@\n",
        keys: XLAT_OPTIONS,
    },
    Section {
        name: "clat",
        array: false,
        about: "The customer-side translator of 464XLAT (RFC 6877): the host's or LAN's \
                private IPv4 addresses mapped to a CLAT IPv6 prefix, IPv4 destinations to \
                the provider's NAT64 prefix.",
        modes: "CLAT",
        reload: Live,
        base: "[clat]\nipv4 = \"192.0.0.2/32\"\nipv6 = \"2001:db8:aaaa::2/128\"\n\
               plat = \"64:ff9b::/96\"\n@\n",
        keys: CLAT,
    },
    Section {
        name: "clat.options",
        array: false,
        about: "The RFC 7915 header translation settings of the CLAT (the same keys as \
                `[siit.options]`).",
        modes: "CLAT",
        reload: Live,
        base: "[clat]\nipv4 = \"192.0.0.2/32\"\nipv6 = \"2001:db8:aaaa::2/128\"\n\
               plat = \"64:ff9b::/96\"\n\n[clat.options]\n@\n",
        keys: XLAT_OPTIONS,
    },
    Section {
        name: "ila",
        array: false,
        about: "Identifier-locator addressing: the router that rewrites an SIR address's \
                prefix to the locator of its identifier and back.",
        modes: "ILA",
        reload: Restart,
        base: "[ila]\nsir_prefix = \"3333:0:0:1::/64\"\n@\n",
        keys: ILA,
    },
    Section {
        name: "ila.mapping",
        array: true,
        about: "An identifier-to-locator mapping. Mappings also change at run time with \
                `quicknat ila`; a reload replaces them with the file's.",
        modes: "ILA",
        reload: Live,
        base: "[ila]\nsir_prefix = \"3333:0:0:1::/64\"\n\n[[ila.mapping]]\n\
               identifier = \"0:0:1:2\"\nlocator = \"2001:0:87:0\"\n@\n",
        keys: ILA_MAPPING,
    },
    Section {
        name: "logging",
        array: false,
        about: "NAT event logging: binding, session, port-block and limit events sent to an \
                IPFIX collector (RFC 8158) and/or a syslog receiver (RFC 5424) over UDP. \
                Off unless `events` and a destination are set.",
        modes: "NAT44, NAT64",
        reload: Restart,
        base: "[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n\n\
               [gateway]\ninside = \"in0\"\noutside = \"out0\"\n\n[logging]\n\
               ipfix = \"192.0.2.9:4739\"\n@\n",
        keys: LOGGING,
    },
    Section {
        name: "routing",
        array: false,
        about: "Prefixes the gateway announces to a routing daemon on the same host (BIRD, \
                FRR) while it is healthy, through routes on a TUN device of its own: a \
                gateway that stops forwarding withdraws them. Off unless `announce` or \
                `standby` is set.",
        modes: "every mode",
        reload: Restart,
        base: "[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n\n\
               [gateway]\ninside = \"in0\"\noutside = \"out0\"\n\n[routing]\n@\n",
        keys: ROUTING,
    },
];

#[rustfmt::skip]
const GATEWAY: &[Key] = &[
    k("inside", "string", Required, "an interface name (1-15 characters)",
      "Interface facing the inside network (the subscribers' side).", "\"eth1\""),
    k("outside", "string", Required, "an interface name, not `inside`",
      "Interface facing the outside network.", "\"eth2\""),
    k("backend", "string", Value("\"af_packet\""), "`\"af_packet\"`, `\"af_xdp\"`",
      "Packet I/O: AF_PACKET rings (any interface) or AF_XDP sockets (an XDP-capable \
       driver, and a build with clang).", "\"af_xdp\""),
    k("workers", "integer", Value("1"), "1-64",
      "Worker threads; each serves a share of the flows (kernel fanout or queues) and is \
       pinned to a core.", "2"),
    k("placement", "string", Value("\"flows\""), "`\"flows\"`, `\"hash\"`",
      "AF_PACKET with several workers: `\"flows\"` gives new flows to the workers in turn, \
       per interface and IP version, and keeps each flow on its worker (a fanout program; \
       the kernel's hash where it cannot load, said in the log and `status`); `\"hash\"` \
       spreads by the kernel's flow hash, even for many flows, uneven for few. AF_XDP: \
       the NIC's queues decide.", "\"hash\""),
    k("rx_hash", "string", Value("\"ports\""), "`\"ports\"`, `\"leave\"`",
      "The NIC's receive hash (RSS) of TCP and UDP over IPv4 and IPv6: `\"ports\"` adds \
       the ports where it hashes addresses only (`ethtool -N IF rx-flow-hash tcp6 sdfn`), \
       so flows between two hosts spread over the queues; the old fields are put back at \
       exit (not after a crash). `\"leave\"` only reads and reports them (log, `status`).",
      "\"leave\""),
    k("busy_poll", "boolean", Value("false"), "",
      "Workers spin instead of sleeping when idle: lower latency, a full core each.", "true"),
    k("stats_interval", SECS, Value("10"), "1-86400",
      "Seconds between the counter lines in the log.", "30"),
    k("kernel_bypass", "boolean", Value("true"), "",
      "Keep the host's own IP stack from also routing the transit packets quicknat \
       translates (they would leave untranslated when IP forwarding is on).", "false"),
    k("offloads_off", "boolean", Value("true"), "",
      "Turn the interfaces' receive and segmentation offloads off at start-up; the \
       original settings are restored at exit.", "false"),
    k("control_socket", "string (path)", Absent("`/run/quicknat.sock` (`/run/quicknat-NAME.sock` \
       with several `--config` files)"), "a path",
      "The control socket `quicknat status`, `sessions`, `reload` and the other verbs talk to.",
      "\"/run/qn.sock\""),
    k("control_group", "string", Absent("root only"), "a group name or number",
      "Group whose members may use the control socket besides root.", "\"netadmin\""),
    k("gso", "boolean", Value("true"), "",
      "AF_PACKET: pass GSO/GRO super-packets and partial checksums through with virtio-net \
       headers (offloads stay on) instead of turning offloads off; `offloads_off` then \
       leaves the offloads on.", "false"),
    k("inside_addresses", "array of strings", Absent("the interface's addresses"),
      "one unicast IPv4 and/or one IPv6 address",
      "The gateway's own addresses on the inside link: the source of the ICMP errors it \
       sends there (and the only ones `translate` knows).", "[\"10.0.0.1\"]"),
    k("outside_addresses", "array of strings", Absent("the interface's addresses"),
      "one unicast IPv4 and/or one IPv6 address",
      "The gateway's own addresses on the outside link.", "[\"198.51.100.1\"]"),
    k("inside_mtu", "integer", Absent("the interface's MTU"), "68-65535",
      "An MTU below the inside interface's to hold packets to (the only MTU `translate` \
       knows).", "1400"),
    k("outside_mtu", "integer", Absent("the interface's MTU"), "68-65535",
      "An MTU below the outside interface's to hold packets to.", "1400"),
    k("metrics", "string", Absent("off"), "an IP address and port (port not 0)",
      "Address of the Prometheus metrics listener (`GET /metrics`).", "\"127.0.0.1:9464\""),
    k("log_level", "string", Absent("`info`"),
      "`error`, `warn`, `info`, `debug`, `trace`, or a tracing filter",
      "Log level or filter; the environment's `QUICKNAT_LOG` or `RUST_LOG` overrides it.",
      "\"debug\"")
        .reload(Start),
    k("log_format", "string", Value("\"text\""), "`\"text\"`, `\"json\"`",
      "Log lines as text or as one JSON object each.", "\"json\"")
        .reload(Start),
    k("xdp_fast_path", "string", Value("\"auto\""), "`\"auto\"`, `\"on\"`, `\"off\"`",
      "The fast path for established flows: an XDP program (AF_XDP) or a tc program \
       (AF_PACKET) forwards the flows the engine hands it. `auto` falls back to the engine \
       alone when the program cannot load (and on AF_XDP over veths, whose peers drop \
       redirected frames without NAPI), `on` refuses to start then, `off` sends every \
       packet through the engine.", "\"off\""),
    k("xdp_fast_path_entries", "integer", Value("65536"), "2-16777216",
      "Flow directions the fast path's map holds per interface (two per session).", "1024"),
    k("xdp_fast_path_idle", SECS, Value("30"), "1-86400",
      "SIIT and CLAT: seconds an idle flow direction stays in the fast path's map.", "60"),
    k("cpus", "string (CPU list)", Absent("the first CPUs quicknat may run on, in order"),
      "a Linux CPU list (`\"2-5,8\"`) of CPUs quicknat may run on",
      "The workers' CPUs: worker i on the i-th CPU listed (wrapping when there are more \
       workers). Keep them apart from the CPUs that take the NIC's interrupts (quicknat \
       warns at start when a worker shares one).", "\"0\""),
    k("reaper_cpu", "integer", Absent("not pinned"), "a CPU quicknat may run on",
      "The CPU of the reaper thread (session expiry, port release).", "0"),
];

#[rustfmt::skip]
const NAT44: &[Key] = &[
    k("filtering", "string", Value("\"endpoint-independent\""),
      "`\"endpoint-independent\"`, `\"address-dependent\"`, `\"address-and-port-dependent\"`",
      "Which outside endpoints may send to a mapping.", "\"address-and-port-dependent\"")
        .rfc("RFC 4787 REQ-8"),
    k("hairpinning", "boolean", Value("true"), "",
      "Inside hosts may reach each other through their public addresses.", "false")
        .rfc("RFC 4787 REQ-9"),
    k("port_preservation", "boolean", Value("true"), "",
      "Keep the inside source port when it is free on the public address (else an RFC \
       6056 random port).", "false")
        .rfc("RFC 4787 §4.2.1"),
    k("port_reuse_hold", SECS, Value("120"), "",
      "Seconds a released public port is held back before another host may get it; a \
       port whose binding never received a packet from outside comes back at once, and \
       past max_sessions held ports per pool the oldest comes back early.", "60")
        .rfc("RFC 6888 REQ-8")
        .reload(Restart),
    k("max_sessions", "integer", Value("1048576"), "at least 1",
      "Upper bound on live sessions; the session table is sized for it at start \
       (`check-config` prints the memory).", "65536")
        .reload(Restart),
    k("decrement_ttl", "boolean", Value("true"), "",
      "Decrement the TTL of forwarded packets (answering Time Exceeded at 1).", "false"),
    k("fragment_timeout", SECS, Value("3"), "1-60",
      "Seconds a fragmented datagram's translation is remembered for its later fragments.",
      "10")
        .reload(Restart),
    k("max_fragment_records", "integer", Value("16384"), "1-16777216",
      "Fragmented datagrams in flight at most.", "1024")
        .reload(Restart),
    FRAGMENT_HOLD_BYTES,
    k("max_simultaneous_opens", "integer", Value("10"), "0-4096",
      "Unsolicited inbound TCP SYNs held at once, waiting for a simultaneous open.", "20")
        .rfc("RFC 5382 REQ-4")
        .reload(Restart),
    k("drop_externally_initiated_tcp", "boolean", Value("false"), "",
      "Drop unsolicited inbound TCP SYNs at once instead of holding them.", "true")
        .rfc("RFC 5382 REQ-4")
        .reload(Restart),
    k("pptp", "boolean", Value("true"), "",
      "Read inside clients' PPTP control connections (TCP port 1723) and translate their \
       calls' GRE by call id, so clients that chose the same call id reach one server; \
       false: PPTP's GRE goes by address only, one client per server and public address.",
      "false")
        .rfc("RFC 2637")
        .reload(Restart),
    k("icmp_error_rate", "integer", Value("200"), "0-1000000",
      "ICMP errors per second one worker sends at most, in all.", "100"),
    k("icmp_error_rate_per_source", "integer", Value("20"), "0-1000000",
      "ICMP errors per second one worker sends at most to one sender.", "10"),
    k("max_sessions_per_host", "integer", Value("10000"), "0 (unlimited) to 4294967295",
      "Sessions one inside host may hold. Live when limits were on at start.", "5000")
        .rfc("RFC 6888 REQ-5"),
    k("max_ports_per_host", "integer", Value("4096"), "0 (unlimited) to 65536",
      "Public ports one inside host may hold per protocol. Live when limits were on at \
       start.", "2048")
        .rfc("RFC 6888 REQ-4"),
    k("reload_drain", "string", Value("\"expire\""), "`\"expire\"`, `\"immediate\"`",
      "What a reload does with sessions on a public address it removed: let them time out, \
       or end them at the next reaper pass.", "\"immediate\""),
    k("port_block_size", "integer", Value("0"), "0 (off) or 8-32768",
      "Port-block allocation: ports per block a subscriber is given at once (one log \
       record per block).", "512")
        .rfc("RFC 7422 §2.1")
        .reload(Restart),
    k("blocks_per_subscriber", "integer", Value("4"), "1-1024",
      "Blocks one subscriber may hold per public address (each serves every protocol).", "8")
        .reload(Restart),
];

#[rustfmt::skip]
const TIMEOUTS: &[Key] = &[
    k("udp", SECS, Value("300"), "", "UDP idle timeout.", "120").rfc("RFC 4787 REQ-5"),
    k("tcp_established", SECS, Value("7440"), "", "TCP established idle timeout.", "3600")
        .rfc("RFC 5382 REQ-5"),
    k("tcp_transitory", SECS, Value("240"), "",
      "TCP timeout once both sides have sent a FIN (TIME_WAIT).", "120")
        .rfc("RFC 5382 REQ-5"),
    k("tcp_closed", SECS, Value("240"), "", "TCP timeout after a RST.", "10"),
    k("tcp_syn_sent", SECS, Value("120"), "",
      "TCP timeout with only the first SYN seen.", "30")
        .rfc("RFC 7857 §2.1"),
    k("tcp_syn_recv", SECS, Value("60"), "",
      "TCP timeout with the SYN-ACK seen, handshake not complete.", "30"),
    k("icmp", SECS, Value("60"), "", "ICMP query (echo) timeout.", "30").rfc("RFC 5508 REQ-2"),
    k("sctp", SECS, Value("210"), "",
      "SCTP association idle timeout (its heartbeats, every 30 s, keep it open).", "120")
        .rfc("RFC 9260 §8.3"),
    k("other", SECS, Value("600"), "",
      "Timeout of every protocol translated by address only (GRE, ESP, ...).", "300"),
];

#[rustfmt::skip]
const NAT44_RULES: &[Key] = &[
    k("inside", "string", Required, "an IPv4 prefix", "Inside hosts the rule covers.",
      "\"10.0.0.0/16\""),
    k("pool", "string or array of strings", Required, "IPv4 prefixes or addresses",
      "Public addresses the rule translates to.",
      "[\"203.0.113.0/28\", \"203.0.113.32/28\"]"),
    k("ports", "string", Value("\"1024-65535\""), "`\"FIRST-LAST\"`",
      "Public port range the rule hands out.", "\"2048-65535\""),
];

#[rustfmt::skip]
const NAT44_STATIC: &[Key] = &[
    k("inside", "string", Required, "an IPv4 address", "The inside host.", "\"10.0.1.6\""),
    k("public", "string", Required, "an IPv4 address", "Its public address.",
      "\"203.0.113.101\""),
];

#[rustfmt::skip]
const NAT44_FORWARD: &[Key] = &[
    k("protocol", "string", Required, "`\"tcp\"`, `\"udp\"`", "The transport protocol.",
      "\"udp\""),
    k("public", "string", Required, "IPv4 address:port",
      "The public endpoint. Adding or removing a forward is live; changing an endpoint of \
       one in force is refused (its binding holds it).", "\"203.0.113.1:8443\"")
        .reload(Restart),
    k("inside", "string", Required, "IPv4 address:port", "The inside server.",
      "\"10.0.0.6:443\"")
        .reload(Restart),
];

#[rustfmt::skip]
const NAT44_DETERMINISTIC: &[Key] = &[
    k("inside", "string", Required, "an IPv4 prefix",
      "The subscribers' prefix (each address one subscriber).", "\"100.64.0.0/25\""),
    k("outside", "string", Required, "an IPv4 prefix", "The public prefix they share.",
      "\"203.0.113.0/27\""),
    k("ports_per_subscriber", "integer", Absent("64512 divided by the sharing ratio"),
      "1-64512", "Ports each subscriber gets on its public address.", "1000"),
];

#[rustfmt::skip]
const NAT64: &[Key] = &[
    k("pref64", "string", Value("\"64:ff9b::/96\""),
      "an RFC 6052 prefix (/32, /40, /48, /56, /64 or /96)",
      "The prefix IPv4 servers are reached at.", "\"2001:db8:64::/96\"")
        .rfc("RFC 6052")
        .reload(Restart),
    k("pool4", "string or array of strings", Required, "IPv4 prefixes or addresses",
      "The public IPv4 pool.", "[\"203.0.113.0/28\", \"203.0.113.64/28\"]")
        .rfc("RFC 6146 §3.5"),
    k("ports", "string", Value("\"1024-65535\""), "`\"FIRST-LAST\"`",
      "Port range of the pool.", "\"2048-65535\""),
    k("filtering", "string", Value("\"endpoint-independent\""),
      "`\"endpoint-independent\"`, `\"address-dependent\"`",
      "Which IPv4 endpoints may send to a binding. `address-dependent` needs its table \
       from the start: a reload may turn it off, not on.", "\"address-dependent\"")
        .rfc("RFC 6146 §3.5.1")
        .reload(Restart),
    k("hairpinning", "boolean", Value("true"), "",
      "IPv6 hosts may reach each other through pool4 addresses.", "false")
        .rfc("RFC 6146 §3.8"),
    k("port_reuse_hold", SECS, Value("120"), "",
      "Seconds a released pool port is held back (at once when its binding never \
       received an IPv4 packet; at most max_sessions held per pool).", "60")
        .reload(Restart),
    k("max_sessions", "integer", Value("1048576"), "1 to the host table's size",
      "Upper bound on live sessions.", "65536")
        .reload(Restart),
    k("fragment_timeout", SECS, Value("3"), "1-60",
      "Seconds a fragmented datagram's translation is remembered.", "10")
        .reload(Restart),
    k("max_fragment_records", "integer", Value("16384"), "1-16777216",
      "Fragmented datagrams in flight at most.", "1024")
        .reload(Restart),
    FRAGMENT_HOLD_BYTES,
    k("max_simultaneous_opens", "integer", Value("10"), "0-4096",
      "Unsolicited inbound TCP SYNs held at once.", "20")
        .rfc("RFC 6146 §3.5.2.2")
        .reload(Restart),
    k("drop_externally_initiated_tcp", "boolean", Value("false"), "",
      "Drop unsolicited inbound TCP SYNs instead of holding them.", "true")
        .rfc("RFC 6146 §3.5.2.2")
        .reload(Restart),
    k("drop_icmpv6_info", "boolean", Value("false"), "",
      "Drop ICMPv6 informational messages (echo) from the inside.", "true")
        .rfc("RFC 6146 §3.5.3")
        .reload(Restart),
    k("max_sessions_per_host", "integer", Value("10000"), "0 (unlimited) to 4294967295",
      "Sessions one IPv6 subscriber may hold.", "5000")
        .rfc("RFC 6888 REQ-5"),
    k("max_ports_per_host", "integer", Value("4096"), "0 (unlimited) to 65536",
      "Pool ports one IPv6 subscriber may hold per protocol.", "2048")
        .rfc("RFC 6888 REQ-4"),
    k("port_preservation", "boolean", Value("true"), "",
      "Keep the IPv6 host's source port when free (else an RFC 6056 random port).", "false"),
    k("subscriber_prefix_len", "integer", Value("64"), "1-64 or 128",
      "The IPv6 prefix length a subscriber is counted by for the per-host limits and \
       port blocks.", "56")
        .reload(Restart),
    k("port_block_size", "integer", Value("0"), "0 (off) or 8-32768",
      "Port-block allocation: ports per block.", "512")
        .reload(Restart),
    k("blocks_per_subscriber", "integer", Value("4"), "1-1024",
      "Blocks one IPv6 subscriber may hold per pool4 address.", "8")
        .reload(Restart),
];

#[rustfmt::skip]
const NAT64_STATIC: &[Key] = &[
    k("protocol", "string", Required, "`\"tcp\"`, `\"udp\"`", "The transport protocol.",
      "\"udp\""),
    k("public", "string", Required, "IPv4 address:port in pool4", "The public endpoint.",
      "\"203.0.113.2:80\""),
    k("inside", "string", Required, "`[IPv6 address]:port`", "The IPv6 server.",
      "\"[2001:db8::81]:80\""),
];

#[rustfmt::skip]
const XLAT_OPTIONS: &[Key] = &[
    k("ipv6_mtu", "integer", Absent("the link's MTU"), "1280-65535",
      "MTU of the IPv6 next hop.", "1400"),
    k("ipv4_mtu", "integer", Absent("the link's MTU"), "68-65535",
      "MTU of the IPv4 next hop.", "1400"),
    k("udp_zero_checksum", "string", Value("\"drop\""), "`\"drop\"`, `\"compute\"`",
      "IPv4 UDP packets with checksum zero: drop them, or compute the checksum IPv6 needs.",
      "\"compute\"")
        .rfc("RFC 7915 §4.5"),
    k("ipv6_udp_zero_checksum", "string", Value("\"drop\""), "`\"drop\"`, `\"compute\"`",
      "IPv6 UDP packets with checksum zero (illegal outside RFC 6935 tunnels).", "\"compute\"")
        .rfc("RFC 8200 §8.1"),
    k("copy_tos", "boolean", Value("true"), "",
      "Copy IPv4 TOS to IPv6 Traffic Class and back (else write zero).", "false")
        .rfc("RFC 7915 §4.1"),
    k("icmp_errors", "boolean", Value("true"), "",
      "Answer refused packets with ICMP errors.", "false")
        .rfc("RFC 7915 §4.4, §5.4"),
    k("lowest_ipv6_mtu", "integer", Value("1280"), "1280-65535",
      "The smallest MTU assumed on the IPv6 side for IPv4 packets without DF.", "1400")
        .rfc("RFC 7915 §4.1"),
    k("df", "string", Value("\"rfc\""), "`\"rfc\"`, `\"clear\"`, `\"set\"`",
      "DF of IPv4 packets translated from IPv6: RFC 7915's rule (set above 1260 bytes), \
       always clear, or always set.", "\"clear\"")
        .rfc("RFC 7915 §5.1"),
    k("tos", "integer", Absent("copied from the Traffic Class"), "0-255",
      "The IPv4 TOS to write instead of copying the Traffic Class.", "0")
        .rfc("RFC 7915 §5.1"),
    k("traffic_class", "integer", Absent("copied from the TOS"), "0-255",
      "The IPv6 Traffic Class to write instead of copying the TOS.", "0")
        .rfc("RFC 7915 §4.1"),
    k("icmp_error_rate", "integer", Value("200"), "0-1000000",
      "ICMP errors per second one worker sends at most, in all.", "100"),
    k("icmp_error_rate_per_source", "integer", Value("20"), "0-1000000",
      "ICMP errors per second one worker sends at most to one sender.", "10"),
];

#[rustfmt::skip]
const SIIT: &[Key] = &[
    k("pref64", "string", Absent("none: only explicit address mappings translate"),
      "an RFC 6052 prefix", "The prefix IPv4 addresses are embedded in.",
      "\"2001:db8:46::/96\"")
        .rfc("RFC 6052"),
    k("icmp_error_source", "string or array of strings",
      Absent("none: such errors are dropped"), "IPv4 addresses or prefixes",
      "IPv4 sources for translated ICMPv6 errors from IPv6 routers that have no IPv4 \
       mapping (RFC 7600 reserves 192.0.0.8); the translator's own ICMPv4 errors use it \
       only on a link without an IPv4 address.", "\"192.0.0.8\"")
        .rfc("RFC 6791"),
    k("eam_hairpin", "string", Value("\"intrinsic\""),
      "`\"off\"`, `\"simple\"`, `\"intrinsic\"`",
      "Hairpinning between explicit address mappings.", "\"simple\"")
        .rfc("RFC 7757 §4"),
];

#[rustfmt::skip]
const SIIT_EAM: &[Key] = &[
    k("ipv4", "string", Required, "an IPv4 prefix", "The IPv4 side.", "\"198.51.100.0/24\""),
    k("ipv6", "string", Required, "an IPv6 prefix with as many host bits as the IPv4 one",
      "The IPv6 side.", "\"2001:db8:5::/120\""),
];

#[rustfmt::skip]
const CLAT: &[Key] = &[
    k("ipv4", "string", Required, "an IPv4 address or prefix",
      "The private IPv4 address or prefix of the host or LAN.", "\"192.0.0.4/32\""),
    k("ipv6", "string", Required, "an IPv6 prefix with the same suffix length",
      "The CLAT IPv6 prefix it maps to.", "\"2001:db8:aaaa::4/128\""),
    k("plat", "string", Required, "an RFC 6052 prefix",
      "The provider's NAT64 prefix (the PLAT).", "\"2001:db8:64::/96\""),
];

#[rustfmt::skip]
const ILA: &[Key] = &[
    k("sir_prefix", "string", Required, "an IPv6 /64",
      "The standard identifier representation (SIR) prefix.", "\"3333:0:0:2::/64\""),
    k("csum_mode", "string", Value("\"adjust-transport\""),
      "`\"no-action\"`, `\"adjust-transport\"`, `\"neutral-map\"`, `\"neutral-map-auto\"`",
      "How transport checksums stay right when the locator changes.", "\"no-action\""),
    k("ident_type", "string", Value("\"luid\""), "`\"luid\"`, `\"use-format\"`",
      "How identifiers are typed.", "\"use-format\""),
    k("unmapped", "string", Value("\"forward\""), "`\"forward\"`, `\"drop\"`",
      "What happens to an SIR address with no mapping.", "\"drop\""),
    k("max_mappings", "integer", Value("65536"), "1-16777216",
      "Room in the mapping table (allocated at start).", "1024"),
    k("icmp_error_rate", "integer", Value("200"), "0-1000000",
      "Time Exceeded / Packet Too Big per second one worker sends at most, in all.", "100"),
    k("icmp_error_rate_per_source", "integer", Value("20"), "0-1000000",
      "The same, to one sender.", "10"),
];

#[rustfmt::skip]
const ILA_MAPPING: &[Key] = &[
    k("identifier", "string", Required, "64 bits as four hex groups", "The identifier.",
      "\"0:0:1:3\""),
    k("locator", "string", Required, "64 bits as four hex groups", "Its locator.",
      "\"2001:0:88:0\""),
];

#[rustfmt::skip]
const LOGGING: &[Key] = &[
    k("events", "array of strings", Absent("none: off"),
      "`\"binding\"`, `\"session\"`, `\"block\"`, `\"limits\"`", "The event classes to record.",
      "[\"binding\", \"limits\"]")
        .rfc("RFC 8158"),
    k("ipfix", "string", Absent("none"), "address:port", "IPFIX collector (UDP).",
      "\"192.0.2.10:4739\"")
        .rfc("RFC 7011, RFC 8158"),
    k("syslog", "string", Absent("none"), "address:port", "syslog receiver (UDP).",
      "\"192.0.2.9:514\"")
        .rfc("RFC 5424"),
    k("template_refresh", SECS, Value("60"), "1-86400",
      "Seconds between IPFIX template re-sends.", "30")
        .rfc("RFC 7011 §8.4"),
    k("template_refresh_messages", "integer", Value("0"), "0 (by time only) and up",
      "IPFIX messages between template re-sends.", "100"),
    k("observation_domain", "integer", Value("1"), "0-4294967295",
      "IPFIX observation domain id.", "7"),
    k("max_message", "integer", Value("1400"), "512-65507",
      "Largest IPFIX message in bytes.", "1200"),
    k("syslog_facility", "integer", Value("16"), "0-23",
      "syslog facility (16: local0).", "17"),
    k("syslog_severity", "integer", Value("6"), "0-7",
      "syslog severity (6: informational).", "5"),
    k("queue", "integer", Value("2048"), "16-1048576",
      "Events each worker's queue holds; events beyond it are counted as lost.", "8192"),
];

#[rustfmt::skip]
const ROUTING: &[Key] = &[
    k("announce", "array of strings", Absent("none"), "IPv4 or IPv6 prefixes",
      "Primary prefixes, announced with metric 100 while healthy.",
      "[\"203.0.113.0/28\"]"),
    k("standby", "array of strings", Absent("none"),
      "IPv4 or IPv6 prefixes not in `announce`",
      "Standby prefixes, announced with `standby_metric`.", "[\"203.0.113.16/28\"]"),
    k("standby_metric", "integer", Value("1000"), "101-4294967295",
      "The standby routes' metric (above the primaries' 100).", "2000"),
    k("table", "integer", Value("250"), "1-4294967295, not 253, 254 or 255",
      "Kernel routing table of the announced routes (not one the kernel forwards by).",
      "251"),
    k("protocol", "integer", Value("250"), "5-255, not 12",
      "`rtm_protocol` of the announced routes, for the routing daemon's import filter.",
      "251"),
    k("device", "string", Value("\"qn-announce\""), "an interface name",
      "The TUN device the routes point at (one per gateway).", "\"qn-a2\""),
    k("health_interval", "string (duration)", Value("\"100ms\""), "`\"10ms\"` to `\"10s\"`",
      "Time between health checks.", "\"1s\""),
];
