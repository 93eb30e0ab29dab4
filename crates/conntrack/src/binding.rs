//! Bindings (the BIB of RFC 6146's vocabulary): which public address and port an inside
//! endpoint is seen as. With endpoint-independent mapping (RFC 4787 REQ-1) one binding
//! serves every session of that inside endpoint, whatever the destination.

use std::hash::BuildHasherDefault;

use hashbrown::HashMap;
use rustc_hash::FxHasher;

use crate::tuple::{Endpoint, Proto};

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Index of a binding in its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BindingId(u32);

impl BindingId {
    /// The slot number.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// An id from a slot number (for tests and serialisation).
    pub fn from_index(i: usize) -> Self {
        Self(i as u32)
    }
}

/// One mapping between an inside endpoint and a public endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// Port space.
    pub proto: Proto,
    /// The inside endpoint.
    pub inside: Endpoint,
    /// The public endpoint the outside sees.
    pub public: Endpoint,
    /// Live sessions using it; a dynamic binding dies with its last session.
    pub sessions: u32,
    /// Configured (port forward, static 1:1): never expires, its port is not pooled.
    pub is_static: bool,
    /// The dynamic rule whose pool the public port came from (`None` for static bindings).
    pub rule: Option<u32>,
}

/// Why an insert failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingExists {
    /// The inside endpoint already has a binding.
    Inside(BindingId),
    /// The public endpoint is already taken.
    Public(BindingId),
}

/// All bindings, found by inside endpoint or by public endpoint.
#[derive(Debug, Default)]
pub struct BindingTable {
    by_inside: FxMap<(Proto, Endpoint), BindingId>,
    by_public: FxMap<(Proto, Endpoint), BindingId>,
    slots: Vec<Option<Binding>>,
    free: Vec<u32>,
}

impl BindingTable {
    /// Number of bindings.
    pub fn len(&self) -> usize {
        self.by_public.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.by_public.is_empty()
    }

    /// The binding of an inside endpoint.
    #[inline]
    pub fn find_inside(&self, proto: Proto, inside: Endpoint) -> Option<BindingId> {
        self.by_inside.get(&(proto, inside)).copied()
    }

    /// The binding of a public endpoint.
    #[inline]
    pub fn find_public(&self, proto: Proto, public: Endpoint) -> Option<BindingId> {
        self.by_public.get(&(proto, public)).copied()
    }

    /// The binding behind an id.
    #[inline]
    pub fn get(&self, id: BindingId) -> Option<&Binding> {
        self.slots.get(id.index()).and_then(|b| b.as_ref())
    }

    /// The binding behind an id, mutably.
    #[inline]
    pub fn get_mut(&mut self, id: BindingId) -> Option<&mut Binding> {
        self.slots.get_mut(id.index()).and_then(|b| b.as_mut())
    }

    /// Adds a binding; refuses one whose inside or public endpoint is taken.
    pub fn insert(&mut self, b: Binding) -> Result<BindingId, BindingExists> {
        if let Some(id) = self.find_inside(b.proto, b.inside) {
            return Err(BindingExists::Inside(id));
        }
        if let Some(id) = self.find_public(b.proto, b.public) {
            return Err(BindingExists::Public(id));
        }
        let id = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(b);
                BindingId(i)
            }
            None => {
                self.slots.push(Some(b));
                BindingId((self.slots.len() - 1) as u32)
            }
        };
        self.by_inside.insert((b.proto, b.inside), id);
        self.by_public.insert((b.proto, b.public), id);
        Ok(id)
    }

    /// Removes a binding and returns it.
    pub fn remove(&mut self, id: BindingId) -> Option<Binding> {
        let b = self.slots.get_mut(id.index())?.take()?;
        self.by_inside.remove(&(b.proto, b.inside));
        self.by_public.remove(&(b.proto, b.public));
        self.free.push(id.0);
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn b(ip: u8, port: u16, pubport: u16) -> Binding {
        Binding {
            proto: Proto::Udp,
            inside: Endpoint::new(Ipv4Addr::new(10, 0, 0, ip), port),
            public: Endpoint::new(Ipv4Addr::new(203, 0, 113, 1), pubport),
            sessions: 0,
            is_static: false,
            rule: Some(0),
        }
    }

    #[test]
    fn found_both_ways_and_never_doubled() {
        let mut t = BindingTable::default();
        let id = t.insert(b(2, 1000, 1000)).unwrap();
        assert_eq!(t.find_inside(Proto::Udp, b(2, 1000, 0).inside), Some(id));
        assert_eq!(t.find_public(Proto::Udp, b(0, 0, 1000).public), Some(id));
        assert_eq!(
            t.find_public(Proto::Tcp, b(0, 0, 1000).public),
            None,
            "port spaces are per protocol"
        );
        assert_eq!(t.insert(b(2, 1000, 2000)), Err(BindingExists::Inside(id)));
        assert_eq!(t.insert(b(3, 1000, 1000)), Err(BindingExists::Public(id)));
        assert_eq!(t.remove(id).unwrap().public.port, 1000);
        assert!(t.is_empty());
        assert!(t.insert(b(3, 1000, 1000)).is_ok());
    }
}
