//! The local control socket: a line protocol on a Unix socket through which an operator
//! lists and edits the ILA mappings of a running gateway while traffic flows.
//!
//! ```text
//! ila list                 ok 2 mappings           then one "IDENT LOC" line per mapping
//! ila add IDENT LOC        ok added 0:0:1:2 2001:0:87:0
//! ila set IDENT LOC        ok set 0:0:1:2 2001:0:88:0 (was 2001:0:87:0)
//! ila del IDENT            ok deleted 0:0:1:2
//! ila reload               ok reload: 1 added, 1 changed, 0 removed, 3 unchanged
//! anything else            error ...
//! ```
//!
//! Identifiers and locators are written as iproute2 writes them (`2001:0:87:0`, see
//! [`Addr64`]). Every change is one operation on the lock-free [`IlaTable`]: a worker
//! translating at the same moment sees the mapping before or after it, never a torn
//! locator. [`apply_mappings`] turns a desired list into adds, locator changes and
//! removals; `ila reload` and the runtime's SIGHUP use it through
//! [`ControlState::reload`]. Removed slots are recycled by [`ControlState::reclaim`],
//! which the runtime calls with the workers' [`Qsbr`] (after removals here, and from its
//! reaper tick).
//!
//! This module never touches packets; a misbehaving client can only get `error` lines
//! or be disconnected (lines are capped at [`MAX_LINE`] bytes, connections at
//! [`MAX_CLIENTS`] of which [`ROOT_RESERVED`] are root's and at most [`MAX_PER_USER`]
//! any other user's, idle ones end after [`IDLE_TIMEOUT`]).
//!
//! Who may use it: the socket file is created with mode 0600 (0660 and the configured
//! group's with `[gateway] control_group`) from its first instant — its mode is set on
//! the socket before `bind` creates the file ([`::io::privs::bind_private_unix`]), so no
//! umask and no race opens it to others — and every connection's peer is checked
//! (`SO_PEERCRED`): root, or a member of the control group ([`Access`]). Anyone else
//! gets `error permission denied ...` and a log line; every change is logged with the
//! peer's uid and pid.
//!
//! Every mode also answers the JSON-lines control API ([`api`]): a line starting with `{`
//! is a JSON request (`{"v":1,"cmd":"sessions"}`), any other line an ILA verb above. The
//! socket is served for every mode ([`Control`] holds what each part acts on).
//!
//! [`IlaTable`]: conntrack::ila_table::IlaTable

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use conntrack::qsbr::Qsbr;
use engine::ila::{Addr64, IlaRouter, IlaSettings};

pub mod api;

/// Where the control socket lives unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/quicknat.sock";

/// Longest request line accepted, in bytes.
pub const MAX_LINE: usize = 1024;

/// Clients served at once; more are answered `error busy` and closed.
pub const MAX_CLIENTS: usize = 16;

/// Of the [`MAX_CLIENTS`] slots, how many only root may take: members of the control
/// group holding connections open cannot lock root out.
pub const ROOT_RESERVED: usize = 4;

/// The most connections one user other than root may hold at once: one member of the
/// control group cannot take every slot the group shares.
pub const MAX_PER_USER: usize = 4;

/// A client whose next request line is not whole this long after it connected or was
/// last answered is told so and hung up on, so idle connections, and slow ones that
/// trickle a byte now and then, do not hold slots.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often blocked accept/read calls look at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// One parsed request line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `ila list`
    List,
    /// `ila add IDENT LOC`: a new mapping.
    Add {
        /// The identifier.
        identifier: u64,
        /// Its locator.
        locator: u64,
    },
    /// `ila set IDENT LOC`: a new locator for an existing mapping.
    Set {
        /// The identifier.
        identifier: u64,
        /// Its new locator.
        locator: u64,
    },
    /// `ila del IDENT`
    Del {
        /// The identifier.
        identifier: u64,
    },
    /// `ila reload`: re-read the configuration file and apply the difference.
    Reload,
}

/// Why a request line was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// An identifier or locator is not in the four-group notation.
    #[error(transparent)]
    Addr(#[from] engine::ila::Addr64Error),
    /// Nothing was asked.
    #[error("empty request; {usage}", usage = USAGE)]
    Empty,
    /// Not a request this socket knows (the line, trimmed).
    #[error("unknown request \"{0}\"; {usage}", usage = USAGE)]
    Unknown(String),
}

/// The requests the socket answers, for error messages.
const USAGE: &str =
    "expected: ila list | ila add IDENT LOC | ila set IDENT LOC | ila del IDENT | ila reload";

/// Why a reload applied nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The gateway was started without a configuration file.
    #[error("no configuration file to reload from")]
    NoFile,
    /// The configuration could not be read (the binary's message, with file and line).
    #[error("{0}")]
    Config(Box<dyn std::error::Error + Send + Sync>),
    /// Settings other than the mappings changed.
    #[error("the [ila] settings other than the mappings changed; they need a restart (no mapping was changed)")]
    SettingsChanged,
}

/// Parses one request line (surrounding whitespace ignored, words separated by spaces).
pub fn parse_request(line: &str) -> Result<Request, RequestError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let addr = |s: &str| s.parse::<Addr64>().map(|a| a.0);
    match words.as_slice() {
        ["ila", "list"] => Ok(Request::List),
        ["ila", "reload"] => Ok(Request::Reload),
        ["ila", "add", id, loc] => Ok(Request::Add {
            identifier: addr(id)?,
            locator: addr(loc)?,
        }),
        ["ila", "set", id, loc] => Ok(Request::Set {
            identifier: addr(id)?,
            locator: addr(loc)?,
        }),
        ["ila", "del", id] => Ok(Request::Del {
            identifier: addr(id)?,
        }),
        [] => Err(RequestError::Empty),
        _ => Err(RequestError::Unknown(line.trim().to_owned())),
    }
}

/// What [`apply_mappings`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplySummary {
    /// Mappings inserted.
    pub added: usize,
    /// Mappings whose locator changed.
    pub changed: usize,
    /// Mappings removed.
    pub removed: usize,
    /// Mappings already as desired.
    pub unchanged: usize,
    /// Identifiers that could not be inserted, with the reason (table full).
    pub failed: Vec<(u64, String)>,
}

impl fmt::Display for ApplySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} added, {} changed, {} removed, {} unchanged",
            self.added, self.changed, self.removed, self.unchanged
        )?;
        if let Some((id, why)) = self.failed.first() {
            write!(
                f,
                ", {} failed (first: {}: {why})",
                self.failed.len(),
                Addr64(*id)
            )?;
        }
        Ok(())
    }
}

/// Makes the router's table hold exactly `desired` (`(identifier, locator)`; for a
/// repeated identifier the last pair wins): removals first, then locator changes (one
/// atomic store each), then inserts. Each mapping changes atomically; traffic for
/// identifiers that stay mapped is never interrupted. Inserts that do not fit are listed
/// in [`ApplySummary::failed`], the rest is still applied.
pub fn apply_mappings(router: &IlaRouter, desired: &[(u64, u64)]) -> ApplySummary {
    apply_mappings_with(router, desired, &mut |_| {})
}

/// [`apply_mappings`], calling `before(identifier)` before each removal or locator change
/// (an offload drops its copy of the mapping first).
fn apply_mappings_with(
    router: &IlaRouter,
    desired: &[(u64, u64)],
    before: &mut dyn FnMut(u64),
) -> ApplySummary {
    let table = router.table();
    let want: HashMap<u64, u64> = desired.iter().copied().collect();
    let have: HashMap<u64, u64> = table.iter().map(|e| (e.identifier, e.locator)).collect();
    let mut s = ApplySummary::default();
    for id in have.keys().filter(|id| !want.contains_key(id)) {
        before(*id);
        if table.remove(*id) {
            s.removed += 1;
        }
    }
    // In `desired` order, so a full table fails the same mappings every time.
    let mut done = std::collections::HashSet::new();
    for &(id, _) in desired {
        if !done.insert(id) {
            continue;
        }
        let loc = want[&id];
        let changed = |before: &mut dyn FnMut(u64)| {
            before(id);
            table.set_locator(id, loc)
        };
        match have.get(&id) {
            Some(&old) if old == loc => s.unchanged += 1,
            Some(_) if changed(before) => s.changed += 1,
            _ => match table.insert(id, loc) {
                Ok(()) => s.added += 1,
                Err(e) => s.failed.push((id, e.to_string())),
            },
        }
    }
    s
}

/// What [`apply_mappings_with`] would report for `desired`, changing nothing.
fn preview_mappings(router: &IlaRouter, desired: &[(u64, u64)]) -> ApplySummary {
    let want: HashMap<u64, u64> = desired.iter().copied().collect();
    let have: HashMap<u64, u64> = router
        .table()
        .iter()
        .map(|e| (e.identifier, e.locator))
        .collect();
    let mut s = ApplySummary {
        removed: have.keys().filter(|id| !want.contains_key(id)).count(),
        ..ApplySummary::default()
    };
    for (id, loc) in &want {
        match have.get(id) {
            Some(old) if old == loc => s.unchanged += 1,
            Some(_) => s.changed += 1,
            None => s.added += 1,
        }
    }
    s
}

/// Re-reads the configuration: the new ILA settings, or why they cannot be had.
pub type ReloadFn =
    Box<dyn Fn() -> Result<IlaSettings, Box<dyn std::error::Error + Send + Sync>> + Send + Sync>;

/// A copy of the mappings kept elsewhere (the XDP fast path's maps): told before any
/// mapping is removed or changed, and brought up to date after each change.
pub(crate) trait MappingOffload: Send + Sync {
    /// `identifier`'s mapping is about to be removed or changed: stop using the copy.
    fn forget(&self, identifier: u64);
    /// Make the copy hold what the table holds now (`mappings`: identifier, locator).
    fn sync(&self, mappings: &[(u64, u64)]);
    /// Whether something besides the table changed since the last sync (routes or
    /// neighbours), so that the timer's sync has work to do.
    fn stale(&self) -> bool;
}

/// What the control server acts on: the router, how to re-read the configuration, and
/// the workers' QSBR state for recycling removed slots.
pub struct ControlState {
    router: Arc<IlaRouter>,
    reload: Option<ReloadFn>,
    qsbr: Option<Arc<Qsbr>>,
    /// Serialises requests, so a reload's diff is not raced by an `add` (and an offload's
    /// sync never runs between its `forget` and the change).
    ops: Mutex<()>,
    /// The XDP fast path's copy of the mappings, when it runs.
    offload: std::sync::OnceLock<Arc<dyn MappingOffload>>,
}

impl fmt::Debug for ControlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlState")
            .field("router", &self.router)
            .field("reload", &self.reload.is_some())
            .field("qsbr", &self.qsbr)
            .field("offload", &self.offload.get().is_some())
            .finish()
    }
}

impl ControlState {
    /// State for `router`; `reload` re-reads the configuration (`None`: `ila reload` is
    /// refused); `qsbr` is what the router's workers report to (`None`: removed slots are
    /// never recycled, which only costs capacity).
    pub fn new(router: Arc<IlaRouter>, reload: Option<ReloadFn>, qsbr: Option<Arc<Qsbr>>) -> Self {
        Self {
            router,
            reload,
            qsbr,
            ops: Mutex::new(()),
            offload: std::sync::OnceLock::new(),
        }
    }

    /// Keeps `offload` in step with the table from now on (once; false if one is
    /// attached already), and fills it.
    pub(crate) fn attach_offload(&self, offload: Arc<dyn MappingOffload>) -> bool {
        let _ops = self.lock();
        if self.offload.set(offload).is_err() {
            return false;
        }
        self.sync_locked();
        true
    }

    /// Brings the offload up to date with the table when it says it is stale (the runtime
    /// calls this on a timer, for next hops that were not resolved and routes that
    /// changed; a change of the table syncs at once).
    pub(crate) fn sync_offload(&self) {
        let _ops = self.lock();
        if self.offload.get().is_some_and(|o| o.stale()) {
            self.sync_locked();
        }
    }

    fn sync_locked(&self) {
        if let Some(o) = self.offload.get() {
            let all: Vec<(u64, u64)> = self
                .router
                .table()
                .iter()
                .map(|e| (e.identifier, e.locator))
                .collect();
            o.sync(&all);
        }
    }

    fn forget(&self, identifier: u64) {
        if let Some(o) = self.offload.get() {
            o.forget(identifier);
        }
    }

    /// The router being controlled.
    pub fn router(&self) -> &Arc<IlaRouter> {
        &self.router
    }

    /// Frees removed mapping slots no worker can still reach; returns how many. The
    /// runtime also calls this from its reaper tick.
    pub fn reclaim(&self) -> usize {
        self.qsbr
            .as_ref()
            .map_or(0, |q| self.router.table().reclaim(q))
    }

    /// Re-reads the configuration and applies its mappings (`ila reload`, SIGHUP). The
    /// router's own settings (SIR prefix, modes) cannot change while running: if they
    /// differ, nothing is applied.
    pub fn reload(&self) -> Result<ApplySummary, ReloadError> {
        let _ops = self.lock();
        self.reload_locked()
    }

    /// What [`reload`](Self::reload) would do, with nothing changed: the same refusal,
    /// or the counts it would report (a mapping a full table would refuse counts as
    /// added).
    pub fn preview_reload(&self) -> Result<ApplySummary, ReloadError> {
        let _ops = self.lock();
        let reload = self.reload.as_ref().ok_or(ReloadError::NoFile)?;
        let settings = reload().map_err(ReloadError::Config)?;
        if settings.config != *self.router.config() {
            return Err(ReloadError::SettingsChanged);
        }
        Ok(preview_mappings(&self.router, &settings.mappings))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guarded value is `()`: a poisoned lock holds nothing inconsistent.
        self.ops.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reload_locked(&self) -> Result<ApplySummary, ReloadError> {
        let reload = self.reload.as_ref().ok_or(ReloadError::NoFile)?;
        let settings = reload().map_err(ReloadError::Config)?;
        if settings.config != *self.router.config() {
            return Err(ReloadError::SettingsChanged);
        }
        let summary =
            apply_mappings_with(&self.router, &settings.mappings, &mut |id| self.forget(id));
        self.sync_locked();
        self.reclaim();
        Ok(summary)
    }

    /// Answers one request line: `ok ...` or `error ...`, then (for `list`) the mappings,
    /// each line ending in `\n`.
    pub fn handle(&self, line: &str) -> String {
        let req = match parse_request(line) {
            Ok(r) => r,
            Err(e) => return format!("error {e}\n"),
        };
        let _ops = self.lock();
        let out = self.handle_locked(req);
        if !matches!(req, Request::List | Request::Reload) {
            self.sync_locked();
        }
        out
    }

    fn handle_locked(&self, req: Request) -> String {
        let table = self.router.table();
        match req {
            Request::List => {
                let mut entries: Vec<_> = table.iter().collect();
                entries.sort_by_key(|e| e.identifier);
                let mut out = format!("ok {} mappings\n", entries.len());
                for e in entries {
                    out.push_str(&format!("{} {}\n", Addr64(e.identifier), Addr64(e.locator)));
                }
                out
            }
            Request::Add {
                identifier,
                locator,
            } => match table.insert(identifier, locator) {
                Ok(()) => format!("ok added {} {}\n", Addr64(identifier), Addr64(locator)),
                Err(e) => format!("error {e}\n"),
            },
            Request::Set {
                identifier,
                locator,
            } => match table.lookup(identifier) {
                Some(old) => {
                    self.forget(identifier);
                    if table.set_locator(identifier, locator) {
                        format!(
                            "ok set {} {} (was {})\n",
                            Addr64(identifier),
                            Addr64(locator),
                            Addr64(old)
                        )
                    } else {
                        no_such(identifier)
                    }
                }
                None => no_such(identifier),
            },
            Request::Del { identifier } => {
                self.forget(identifier);
                if table.remove(identifier) {
                    self.reclaim();
                    format!("ok deleted {}\n", Addr64(identifier))
                } else {
                    format!("error {}: no such mapping\n", Addr64(identifier))
                }
            }
            Request::Reload => match self.reload_locked() {
                Ok(s) if s.failed.is_empty() => format!("ok reload: {s}\n"),
                Ok(s) => format!("error reload: {s}\n"),
                Err(e) => format!("error reload: {e}\n"),
            },
        }
    }
}

fn no_such(identifier: u64) -> String {
    format!(
        "error {}: no such mapping (use ila add)\n",
        Addr64(identifier)
    )
}

/// What the control server answers with: the ILA text verbs (ILA mode only) and the JSON
/// API (every mode). Built from an `Arc<ControlState>` alone for an ILA-only server.
#[derive(Debug, Default)]
pub struct Control {
    /// The ILA verbs' state.
    pub ila: Option<Arc<ControlState>>,
    /// The JSON API's state.
    pub api: Option<Arc<api::ApiState>>,
}

impl From<Arc<ControlState>> for Control {
    fn from(ila: Arc<ControlState>) -> Self {
        Control {
            ila: Some(ila),
            api: None,
        }
    }
}

impl Control {
    /// Answers one text (non-JSON) line.
    fn handle_text(&self, line: &str) -> String {
        match &self.ila {
            Some(ila) => ila.handle(line),
            None if line.trim().is_empty() => format!("error {}\n", RequestError::Empty),
            None => "error ila requests need an ILA gateway; JSON requests start with { (e.g. {\"v\":1,\"cmd\":\"status\"})\n".to_owned(),
        }
    }
}

/// Who may use the control socket: root, and the members of one group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// The control group's id (`[gateway] control_group`), if any.
    pub gid: Option<u32>,
}

impl Access {
    /// Whether a peer with `cred` may send requests; `groups` gives its supplementary
    /// groups (asked only when needed).
    pub fn allows(&self, cred: ::io::privs::PeerCred, groups: impl FnOnce() -> Vec<u32>) -> bool {
        cred.uid == 0
            || self
                .gid
                .is_some_and(|g| cred.gid == g || groups().contains(&g))
    }

    /// Who is allowed, for messages.
    pub fn describe(&self) -> String {
        match self.gid {
            Some(g) => format!("root or group {g}"),
            None => "root".to_owned(),
        }
    }
}

/// The id of group `name` (a name in /etc/group, or a number).
pub fn group_id(name: &str) -> io::Result<u32> {
    if let Ok(n) = name.parse() {
        return Ok(n);
    }
    let groups = std::fs::read_to_string("/etc/group")?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(n, _)| *n == name)
        .and_then(|(_, gid)| gid.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                ErrorKind::NotFound,
                format!("control group \"{name}\": no such group in /etc/group"),
            )
        })
}

/// A bound control socket, not served yet (binding happens while the process still has
/// the privileges to chown it; serving after they are dropped).
#[derive(Debug)]
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
    access: Access,
    /// [`IDLE_TIMEOUT`], shorter in tests.
    idle: Duration,
}

/// Binds the control socket at `path` (a stale socket left by a dead process is
/// replaced, a live one is an `AddrInUse` error): mode 0600 from the moment it exists,
/// or with `access.gid` that group's and 0660 (widened only after the group is set).
pub fn bind(path: &Path, access: Access) -> io::Result<ControlSocket> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                ErrorKind::AlreadyExists,
                format!("{}: exists and is not a socket", path.display()),
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                ErrorKind::AddrInUse,
                format!("{}: another quicknat is listening there", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = ::io::privs::bind_private_unix(path, 0o600)?;
    if let Some(gid) = access.gid {
        let widen = std::os::unix::fs::chown(path, None, Some(gid))
            .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)));
        if let Err(e) = widen {
            let _ = std::fs::remove_file(path);
            return Err(io::Error::new(
                e.kind(),
                format!("{}: giving it to group {gid}: {e}", path.display()),
            ));
        }
    }
    listener.set_nonblocking(true)?;
    Ok(ControlSocket {
        listener,
        path: path.to_owned(),
        access,
        idle: IDLE_TIMEOUT,
    })
}

impl ControlSocket {
    /// The same socket, hanging up on clients idle for `idle` instead of [`IDLE_TIMEOUT`].
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// Serves the socket on a thread until `stop` is set; the socket file is removed on
    /// the way out. Every change is reported on `log` (a line each; a client waits while
    /// the log is behind), and refused peers (dropped when the log is behind: a flood of
    /// refusals never stalls the server).
    pub fn serve(
        self,
        state: impl Into<Control>,
        stop: Arc<AtomicBool>,
        log: SyncSender<String>,
    ) -> io::Result<JoinHandle<()>> {
        let state = Arc::new(state.into());
        std::thread::Builder::new()
            .name(crate::live::threads::CONTROL.into())
            .spawn(move || accept_loop(&self, &state, &stop, &log))
    }
}

/// Binds the control socket at `path` for root only and serves it until `stop` (see
/// [`bind`] and [`ControlSocket::serve`]).
pub fn serve(
    path: &Path,
    state: impl Into<Control>,
    stop: Arc<AtomicBool>,
    log: SyncSender<String>,
) -> io::Result<JoinHandle<()>> {
    bind(path, Access::default())?.serve(state, stop, log)
}

fn accept_loop(
    sock: &ControlSocket,
    state: &Arc<Control>,
    stop: &Arc<AtomicBool>,
    log: &SyncSender<String>,
) {
    let clients = Arc::new(Mutex::new(Slots::default()));
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match sock.listener.accept() {
            Ok((mut stream, _)) => {
                threads.retain(|t| !t.is_finished());
                let peer = match ::io::privs::peer_cred(&stream) {
                    Ok(c)
                        if sock.access.allows(c, || {
                            ::io::privs::peer_groups(&stream).unwrap_or_default()
                        }) =>
                    {
                        c
                    }
                    refused => {
                        let who = match refused {
                            Ok(c) => format!("uid {} gid {} pid {}", c.uid, c.gid, c.pid),
                            Err(e) => format!("a peer of unknown credentials ({e})"),
                        };
                        let allowed = sock.access.describe();
                        let _ = log.try_send(format!(
                            "warning: control: refused {who} on {} (allowed: {allowed})",
                            sock.path.display()
                        ));
                        refuse(
                            &mut stream,
                            &format!("error permission denied: {who} is not {allowed}\n"),
                        );
                        continue;
                    }
                };
                let taken = clients
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(peer.uid);
                if let Err(why) = taken {
                    refuse(&mut stream, &format!("error busy: {why}\n"));
                    continue;
                }
                let idle = sock.idle;
                let (state, stop, count, log) = (
                    Arc::clone(state),
                    Arc::clone(stop),
                    Arc::clone(&clients),
                    log.clone(),
                );
                let spawned = std::thread::Builder::new()
                    .name(crate::live::threads::CONTROL_CLIENT.into())
                    .spawn(move || {
                        // A client that goes away mid-answer is not the server's problem.
                        let _ = serve_client(stream, &state, &stop, peer, &log, idle);
                        count
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .give_back(peer.uid);
                    });
                match spawned {
                    Ok(t) => threads.push(t),
                    Err(_) => {
                        clients
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .give_back(peer.uid);
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => std::thread::sleep(POLL),
        }
    }
    for t in threads {
        let _ = t.join();
    }
    let _ = std::fs::remove_file(&sock.path);
}

/// The client slots taken, in all and by user.
#[derive(Debug, Default)]
struct Slots {
    total: usize,
    by_uid: std::collections::HashMap<u32, usize>,
}

impl Slots {
    /// Takes a slot for a client of user `uid`, or says why none is free: all taken (for
    /// anyone but root, all but [`ROOT_RESERVED`]), or the user holds [`MAX_PER_USER`].
    fn take(&mut self, uid: u32) -> Result<(), String> {
        if self.total >= client_slots(uid) {
            return Err("too many control clients".into());
        }
        let mine = self.by_uid.entry(uid).or_default();
        if uid != 0 && *mine >= MAX_PER_USER {
            return Err(format!(
                "uid {uid} holds {MAX_PER_USER} control connections already"
            ));
        }
        *mine += 1;
        self.total += 1;
        Ok(())
    }

    /// Gives back a slot [`take`](Self::take) gave a client of `uid`.
    fn give_back(&mut self, uid: u32) {
        if let Some(n) = self.by_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.by_uid.remove(&uid);
            }
            self.total = self.total.saturating_sub(1);
        }
    }
}

/// How many clients may be connected when one of user `uid` is accepted: all
/// [`MAX_CLIENTS`] for root, fewer by [`ROOT_RESERVED`] for anyone else.
fn client_slots(uid: u32) -> usize {
    if uid == 0 {
        MAX_CLIENTS
    } else {
        MAX_CLIENTS - ROOT_RESERVED
    }
}

/// Answers `answer` to a refused peer and hangs up, never waiting on it: what it sent
/// already is read first (a Unix socket closed with unread data resets the connection,
/// and the peer might not see the answer).
fn refuse(stream: &mut UnixStream, answer: &str) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(answer.as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; MAX_LINE];
    for _ in 0..4 {
        if !matches!(stream.read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
}

/// Answers request lines from one client (`peer`) until it hangs up, sends an over-long
/// line, sends nothing for `idle`, or `stop` is set; logs every request that changes
/// mappings, with its answer.
fn serve_client(
    stream: UnixStream,
    state: &Control,
    stop: &AtomicBool,
    peer: ::io::privs::PeerCred,
    log: &SyncSender<String>,
    idle: Duration,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(api::WRITE_TIMEOUT))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    // When the client connected or was last answered: its next request line must be
    // whole within `idle` of it, however it trickles in (a byte now and then does not
    // keep a slot).
    let mut heard = std::time::Instant::now();
    let slow = |line: &[u8]| {
        if line.is_empty() {
            format!("error idle: no request for {} s\n", idle.as_secs())
        } else {
            format!("error slow: no whole request within {} s\n", idle.as_secs())
        }
    };
    while !stop.load(Ordering::Relaxed) {
        // One read at a time, assembled in `line` across reads and timeouts: a client
        // that trickles its request cannot keep this loop from checking its deadline.
        match read_step(&mut reader, &mut line) {
            Ok(Step::Closed) if line.is_empty() => return Ok(()),
            Ok(_) if line.len() > MAX_LINE => {
                let answer = format!("error request longer than {MAX_LINE} bytes\n");
                return writer.write_all(answer.as_bytes());
            }
            Ok(Step::Partial) => {
                if heard.elapsed() >= idle {
                    return writer.write_all(slow(&line).as_bytes());
                }
            }
            Ok(step) => {
                // Without a newline the client has finished sending: answer, then stop.
                let last = step == Step::Closed;
                let answer = match std::str::from_utf8(&line) {
                    Ok(text) if text.trim_start().starts_with('{') => {
                        serve_json(state, text, &mut writer, stop, peer, log)?;
                        String::new()
                    }
                    Ok(text) => {
                        let answer = state.handle_text(text);
                        if matches!(parse_request(text), Ok(r) if r != Request::List) {
                            // Waits for room: every change is logged, at the log's pace.
                            let _ = log.send(format!(
                                "control: uid {} pid {}: {} -> {}",
                                peer.uid,
                                peer.pid,
                                text.trim(),
                                answer.lines().next().unwrap_or("")
                            ));
                        }
                        answer
                    }
                    Err(_) => "error request is not UTF-8\n".to_owned(),
                };
                if !answer.is_empty() {
                    writer.write_all(answer.as_bytes())?;
                }
                line.clear();
                if last {
                    return Ok(());
                }
                heard = std::time::Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if heard.elapsed() >= idle {
                    return writer.write_all(slow(&line).as_bytes());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What one [`read_step`] added to the request line being assembled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// The client closed its end (what came before, if anything, is its last request).
    Closed,
    /// Bytes, no newline yet.
    Partial,
    /// The line is whole (it ends with its newline).
    Whole,
}

/// One read of what the client sent, appended to `line` up to and including its newline
/// and to at most [`MAX_LINE`] + 1 bytes (one more than a line may hold, so an over-long
/// one shows).
fn read_step(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<Step> {
    let buf = reader.fill_buf()?;
    if buf.is_empty() {
        return Ok(Step::Closed);
    }
    let room = (MAX_LINE + 1).saturating_sub(line.len());
    let avail = &buf[..buf.len().min(room)];
    let (n, whole) = match avail.iter().position(|&b| b == b'\n') {
        Some(i) => (i + 1, true),
        None => (avail.len(), false),
    };
    line.extend_from_slice(&avail[..n]);
    reader.consume(n);
    Ok(if whole { Step::Whole } else { Step::Partial })
}

/// Answers one JSON request line on `writer` (buffered: a listing goes out in large
/// writes); logs what changes the gateway (`reload`), with the peer and the answer.
fn serve_json(
    state: &Control,
    text: &str,
    writer: &mut UnixStream,
    stop: &AtomicBool,
    peer: ::io::privs::PeerCred,
    log: &SyncSender<String>,
) -> io::Result<()> {
    let Some(api) = &state.api else {
        return writer.write_all(api::error_line("this socket serves no JSON API").as_bytes());
    };
    let mut out = io::BufWriter::with_capacity(64 * 1024, &*writer);
    let mut recorder = Recorder {
        out: &mut out,
        first: Vec::new(),
    };
    let handled = api.handle(text, &mut recorder, stop)?;
    let first = String::from_utf8_lossy(&recorder.first)
        .trim_end()
        .to_owned();
    out.flush()?;
    // What changes the gateway is logged with who asked.
    let acted = match handled {
        Ok(api::ApiRequest::Reload { dry_run: false }) => Some("reload"),
        Ok(api::ApiRequest::ClearSessions { dry_run: false, .. }) => Some("clear_sessions"),
        Ok(api::ApiRequest::Drain { cancel: false }) => Some("drain"),
        Ok(api::ApiRequest::Drain { cancel: true }) => Some("drain cancel"),
        _ => None,
    };
    if let Some(cmd) = acted {
        let _ = log.send(format!(
            "control: uid {} pid {}: {cmd} -> {first}",
            peer.uid, peer.pid
        ));
    }
    Ok(())
}

/// Passes writes on, keeping the first line's bytes (for the log).
struct Recorder<'a, W: Write> {
    out: &'a mut W,
    first: Vec<u8>,
}

impl<W: Write> Write for Recorder<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.first.ends_with(b"\n") && self.first.len() < MAX_LINE {
            let take = buf
                .iter()
                .position(|b| *b == b'\n')
                .map_or(buf.len(), |i| i + 1);
            self.first.extend_from_slice(&buf[..take.min(MAX_LINE)]);
        }
        self.out.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests;
