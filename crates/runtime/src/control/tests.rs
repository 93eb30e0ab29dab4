//! Control protocol tests: request parsing, the mapping diff, and answers to each request.

use super::*;
use engine::ila::{CsumMode, IdentFormat, IlaConfig, UnmappedAction};

const CONFIG: IlaConfig = IlaConfig {
    sir_prefix: 0x3333_0000_0000_0001,
    csum: CsumMode::AdjustTransport,
    format: IdentFormat::Luid,
    unmapped: UnmappedAction::Forward,
};

fn router(capacity: usize, mappings: &[(u64, u64)]) -> Arc<IlaRouter> {
    IlaSettings {
        config: CONFIG,
        capacity,
        mappings: mappings.to_vec(),
        icmp_rate: Default::default(),
    }
    .router()
    .unwrap()
}

fn contents(r: &IlaRouter) -> Vec<(u64, u64)> {
    let mut v: Vec<_> = r
        .table()
        .iter()
        .map(|e| (e.identifier, e.locator))
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn requests_parse() {
    assert_eq!(parse_request("ila list\n"), Ok(Request::List));
    assert_eq!(parse_request("  ila   reload  "), Ok(Request::Reload));
    assert_eq!(
        parse_request("ila add 0:0:1:2 2001:0:87:0"),
        Ok(Request::Add {
            identifier: 0x1_0002,
            locator: 0x2001_0000_0087_0000
        })
    );
    assert_eq!(
        parse_request("ila set 2000:0:1:87 2001:0:88:0\r\n"),
        Ok(Request::Set {
            identifier: 0x2000_0000_0001_0087,
            locator: 0x2001_0000_0088_0000
        })
    );
    assert_eq!(
        parse_request("ila del ffff:0:0:1"),
        Ok(Request::Del {
            identifier: 0xffff_0000_0000_0001
        })
    );
    for bad in [
        "",
        "ila",
        "ila list extra",
        "ila add 0:0:1:2",
        "ila add 0:0:1:2 2001::87",
        "ila del 1:2:3",
        "ILA list",
        "nat44 list",
        "ila add 0:0:1:2 1:2:3:4 5",
    ] {
        let e = parse_request(bad).expect_err(bad).to_string();
        assert!(!e.contains('\n'), "{e}");
    }
    assert!(parse_request("ila add 0:0:1:2 2001::87")
        .unwrap_err()
        .to_string()
        .contains("2001::87"));
}

#[test]
fn apply_adds_changes_and_removes() {
    let r = router(8, &[(1, 10), (2, 20), (3, 30)]);
    let s = apply_mappings(&r, &[(1, 10), (2, 21), (4, 40)]);
    assert_eq!(
        s,
        ApplySummary {
            added: 1,
            changed: 1,
            removed: 1,
            unchanged: 1,
            failed: vec![]
        }
    );
    assert_eq!(contents(&r), vec![(1, 10), (2, 21), (4, 40)]);
    assert_eq!(s.to_string(), "1 added, 1 changed, 1 removed, 1 unchanged");
    // Applying the same list again changes nothing.
    let again = apply_mappings(&r, &[(1, 10), (2, 21), (4, 40)]);
    assert_eq!(
        (again.unchanged, again.added + again.changed + again.removed),
        (3, 0)
    );
    // An empty list empties the table; a repeated identifier takes its last locator.
    assert_eq!(apply_mappings(&r, &[]).removed, 3);
    assert_eq!(apply_mappings(&r, &[(5, 50), (5, 51)]).added, 1);
    assert_eq!(contents(&r), vec![(5, 51)]);
}

#[test]
fn apply_reports_what_does_not_fit() {
    let r = router(2, &[]);
    let s = apply_mappings(&r, &[(1, 10), (2, 20), (3, 30), (4, 40)]);
    assert_eq!(s.added, 2);
    assert_eq!(s.failed.iter().map(|f| f.0).collect::<Vec<_>>(), vec![3, 4]);
    assert!(
        s.to_string()
            .contains("2 failed (first: 0:0:0:3: ila table: full"),
        "{s}"
    );
    assert_eq!(contents(&r), vec![(1, 10), (2, 20)]);
}

#[test]
fn removed_slots_come_back_after_reclaim() {
    let qsbr = Qsbr::new(1);
    let worker = qsbr.handle(0);
    let state = ControlState::new(router(1, &[(1, 10)]), None, Some(Arc::clone(&qsbr)));
    assert_eq!(state.handle("ila del 0:0:0:1"), "ok deleted 0:0:0:1\n");
    // The worker has not passed a quiescent point since the removal: still in limbo.
    assert!(state
        .handle("ila add 0:0:0:2 0:0:0:20")
        .starts_with("error ila table: full"));
    worker.quiescent();
    assert_eq!(state.reclaim(), 1);
    assert_eq!(
        state.handle("ila add 0:0:0:2 0:0:0:20"),
        "ok added 0:0:0:2 0:0:0:20\n"
    );
}

#[test]
fn each_request_is_answered() {
    let state = ControlState::new(router(8, &[(2, 0x20)]), None, None);
    assert_eq!(
        state.handle("ila add 0:0:0:1 2001:0:87:0\n"),
        "ok added 0:0:0:1 2001:0:87:0\n"
    );
    assert!(state
        .handle("ila add 0:0:0:1 2001:0:87:0")
        .starts_with("error ila table: identifier"));
    assert_eq!(
        state.handle("ila set 0:0:0:1 2001:0:88:0"),
        "ok set 0:0:0:1 2001:0:88:0 (was 2001:0:87:0)\n"
    );
    assert_eq!(
        state.handle("ila set 0:0:0:9 1:1:1:1"),
        "error 0:0:0:9: no such mapping (use ila add)\n"
    );
    assert_eq!(
        state.handle("ila list"),
        "ok 2 mappings\n0:0:0:1 2001:0:88:0\n0:0:0:2 0:0:0:20\n"
    );
    assert_eq!(state.handle("ila del 0:0:0:2"), "ok deleted 0:0:0:2\n");
    assert_eq!(
        state.handle("ila del 0:0:0:2"),
        "error 0:0:0:2: no such mapping\n"
    );
    assert!(state
        .handle("ila reload")
        .starts_with("error reload: no configuration file"));
    assert!(state
        .handle("bogus")
        .starts_with("error unknown request \"bogus\""));
}

#[test]
fn reload_applies_the_difference_or_refuses_new_settings() {
    let next = Arc::new(Mutex::new(IlaSettings {
        config: CONFIG,
        capacity: 8,
        mappings: vec![(1, 11), (3, 30)],
        icmp_rate: Default::default(),
    }));
    let source = Arc::clone(&next);
    let reload: ReloadFn = Box::new(move || Ok(source.lock().unwrap().clone()));
    let state = ControlState::new(router(8, &[(1, 10), (2, 20)]), Some(reload), None);
    assert_eq!(
        state.handle("ila reload"),
        "ok reload: 1 added, 1 changed, 1 removed, 0 unchanged\n"
    );
    assert_eq!(contents(state.router()), vec![(1, 11), (3, 30)]);
    next.lock().unwrap().config.unmapped = UnmappedAction::Drop;
    assert!(state
        .reload()
        .unwrap_err()
        .to_string()
        .contains("need a restart"));
    assert_eq!(contents(state.router()), vec![(1, 11), (3, 30)]);
}

/// A copy of the mappings that records what it was told, and what the table held for the
/// identifier when it was told to forget it.
#[derive(Default)]
struct Recorder {
    router: Mutex<Option<Arc<IlaRouter>>>,
    events: Mutex<Vec<String>>,
    stale: std::sync::atomic::AtomicBool,
}

impl MappingOffload for Recorder {
    fn forget(&self, identifier: u64) {
        let held = self
            .router
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|r| r.table().lookup(identifier));
        self.events
            .lock()
            .unwrap()
            .push(format!("forget {identifier:x} (table: {held:x?})"));
    }

    fn sync(&self, mappings: &[(u64, u64)]) {
        let mut m = mappings.to_vec();
        m.sort_unstable();
        self.events.lock().unwrap().push(format!("sync {m:x?}"));
    }

    fn stale(&self) -> bool {
        self.stale.swap(false, Ordering::Relaxed)
    }
}

/// The XDP fast path's copy: filled when attached; told to forget a mapping
/// while the table still holds it, before `set`, `del` and a reload change or remove it;
/// synced after every change; never told anything by `list`; synced by the timer only
/// when it says it is stale.
#[test]
fn an_offload_forgets_a_mapping_before_it_changes_and_is_synced_after() {
    let next = Arc::new(Mutex::new(IlaSettings {
        config: CONFIG,
        capacity: 8,
        mappings: vec![(1, 0x11), (3, 0x30)],
        icmp_rate: Default::default(),
    }));
    let source = Arc::clone(&next);
    let reload: ReloadFn = Box::new(move || Ok(source.lock().unwrap().clone()));
    let state = ControlState::new(router(8, &[(1, 0x10), (2, 0x20)]), Some(reload), None);
    let rec = Arc::new(Recorder::default());
    *rec.router.lock().unwrap() = Some(Arc::clone(state.router()));
    assert!(state.attach_offload(Arc::clone(&rec) as Arc<dyn MappingOffload>));
    assert!(!state.attach_offload(Arc::clone(&rec) as Arc<dyn MappingOffload>));
    let take = || std::mem::take(&mut *rec.events.lock().unwrap());
    assert_eq!(take(), ["sync [(1, 10), (2, 20)]"]);
    state.handle("ila list");
    assert!(take().is_empty());
    state.handle("ila add 0:0:0:4 0:0:0:40");
    assert_eq!(take(), ["sync [(1, 10), (2, 20), (4, 40)]"]);
    state.handle("ila set 0:0:0:4 0:0:0:41");
    assert_eq!(
        take(),
        [
            "forget 4 (table: Some(40))",
            "sync [(1, 10), (2, 20), (4, 41)]"
        ]
    );
    state.handle("ila del 0:0:0:2");
    assert_eq!(
        take(),
        ["forget 2 (table: Some(20))", "sync [(1, 10), (4, 41)]"]
    );
    assert!(state.handle("ila reload").starts_with("ok reload"));
    let mut ev = take();
    let last = ev.pop();
    ev.sort();
    assert_eq!(
        ev,
        ["forget 1 (table: Some(10))", "forget 4 (table: Some(41))"]
    );
    assert_eq!(last.as_deref(), Some("sync [(1, 11), (3, 30)]"));
    state.sync_offload();
    assert!(take().is_empty(), "nothing changed");
    rec.stale.store(true, Ordering::Relaxed);
    state.sync_offload();
    assert_eq!(take(), ["sync [(1, 11), (3, 30)]"]);
}

// Who may use the socket.
#[test]
fn only_root_and_the_control_group_are_allowed() {
    use ::io::privs::PeerCred;
    let peer = |uid, gid| PeerCred { pid: 1, uid, gid };
    let root_only = Access::default();
    assert!(root_only.allows(peer(0, 0), Vec::new));
    assert!(
        !root_only.allows(peer(1000, 0), || vec![0]),
        "root's group is not root"
    );
    let group = Access { gid: Some(4242) };
    assert!(group.allows(peer(0, 1), Vec::new));
    assert!(group.allows(peer(65534, 4242), || panic!("not asked")));
    assert!(group.allows(peer(65534, 65534), || vec![10, 4242]));
    assert!(!group.allows(peer(65534, 65534), || vec![10]));
    assert_eq!(group.describe(), "root or group 4242");
    assert_eq!(group_id("4242").unwrap(), 4242);
    assert_eq!(group_id("root").unwrap(), 0);
    let e = group_id("qn-no-such-group").unwrap_err();
    assert!(e.to_string().contains("qn-no-such-group"), "{e}");
}

/// Root keeps slots of its own: the control group's members cannot take every one.
#[test]
fn root_has_slots_no_one_else_can_take() {
    assert_eq!(client_slots(0), MAX_CLIENTS);
    assert_eq!(client_slots(1000), MAX_CLIENTS - ROOT_RESERVED);
    assert!(client_slots(1000) > 0);
}

/// One user other than root holds at most MAX_PER_USER slots; root is capped only by the
/// total; a slot given back can be taken again.
#[test]
fn slots_are_capped_per_user_and_reserved_for_root() {
    let mut s = Slots::default();
    for _ in 0..MAX_PER_USER {
        s.take(1000).unwrap();
    }
    let e = s.take(1000).unwrap_err();
    assert!(e.contains("uid 1000 holds"), "{e}");
    // Other members fill what the group may take; then only root gets in.
    let mut uid = 1001;
    while s.total < MAX_CLIENTS - ROOT_RESERVED {
        s.take(uid).unwrap();
        uid += 1;
    }
    assert_eq!(s.take(2000).unwrap_err(), "too many control clients");
    for _ in 0..ROOT_RESERVED {
        s.take(0).unwrap();
    }
    assert!(s.take(0).is_err(), "the total caps root too");
    // A member's slot given back goes to whoever comes next within the limits: root.
    s.give_back(1000);
    assert!(s.take(1001).is_err(), "the group's share is still full");
    s.take(0).unwrap();
    s.give_back(4242); // never took one: nothing changes
    assert_eq!(s.total, MAX_CLIENTS);
}
