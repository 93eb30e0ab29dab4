//! NAT64's answers to the control socket: NAT44's walks (`nat44::census`) with the host
//! ids shown as the IPv6 hosts they stand for and the IPv4 remotes also as the IPv6 hosts
//! address them (Pref64-embedded).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use conntrack::host_table::HostTable;
use conntrack::{SessionView, Timestamp};

use super::Nat64Shared;
use crate::introspect::{
    BindingInfo, Census, Introspect, PoolAddrUsage, SessionFilter, SessionInfo,
};
use crate::nat44::census::Addressing;

impl Addressing for Nat64Shared {
    fn inside(&self, a: Ipv4Addr) -> Option<IpAddr> {
        HostTable::is_host_id(a)
            .then(|| self.hosts.0.addr(a))
            .flatten()
            .map(IpAddr::V6)
    }
    fn remote(&self, a: Ipv4Addr) -> IpAddr {
        IpAddr::V6(self.v4_to_inside(a).unwrap_or_else(|| self.pref64.embed(a)))
    }
    fn opened_inside(&self, v: &SessionView) -> bool {
        HostTable::is_host_id(v.initial.src.addr)
    }
}

impl Introspect for Arc<Nat64Shared> {
    fn sessions(
        &self,
        now: Timestamp,
        filter: &SessionFilter,
        visit: &mut dyn FnMut(&SessionInfo) -> bool,
    ) -> usize {
        self.nat.list_sessions(now, filter, &**self, visit)
    }
    fn clear_sessions(
        &self,
        now: Timestamp,
        filter: &SessionFilter,
        dry_run: bool,
    ) -> Result<usize, crate::nat44::clear::ClearError> {
        let wait = crate::nat44::clear::CLEAR_WAIT;
        self.nat.end_sessions(now, filter, &**self, dry_run, wait)
    }
    fn bindings(&self, visit: &mut dyn FnMut(&BindingInfo) -> bool) -> usize {
        self.nat.list_bindings(&**self, visit)
    }
    // The pools of the generation in force (a reload may have replaced them).
    fn pool_usage(&self) -> Vec<PoolAddrUsage> {
        self.nat.current().pool_usage_of()
    }
    fn census(&self) -> Census {
        self.nat.current().census_of()
    }
}
