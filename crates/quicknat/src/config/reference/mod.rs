//! The configuration reference: every key of every section with its type, default,
//! allowed values, reload behaviour and meaning ([`SECTIONS`]), rendered as the book's
//! page (`docs/src/reference/config.md`, [`markdown`]) and as `quicknat.toml(5)`
//! ([`man_page`]). The tests hold the table to the parser, so the pages cannot drift
//! from the code: a key added to the parser and not here fails them.

mod keys;
#[cfg(test)]
mod tests;

pub use keys::SECTIONS;

/// One section (TOML table or array of tables) of the file.
#[derive(Debug)]
pub struct Section {
    /// Its dotted name: `nat44.timeouts`.
    pub name: &'static str,
    /// An array of tables (`[[nat44.rule]]`), written once per entry.
    pub array: bool,
    /// What the section is for.
    pub about: &'static str,
    /// The modes it applies to.
    pub modes: &'static str,
    /// What a reload does with its keys, unless a key says otherwise.
    pub reload: Reload,
    /// A smallest valid file with this section, `@` on the line where a key goes (tests).
    pub base: &'static str,
    /// Its keys (sub-tables are sections of their own).
    pub keys: &'static [Key],
}

/// One key.
#[derive(Debug)]
pub struct Key {
    /// The key's name within its section.
    pub name: &'static str,
    /// Its TOML type.
    pub ty: &'static str,
    /// The value in force when it is not written.
    pub default: Default,
    /// The values accepted, when narrower than the type.
    pub allowed: &'static str,
    /// What it means, in one or two sentences.
    pub meaning: &'static str,
    /// The RFC it implements, if one.
    pub rfc: &'static str,
    /// A valid value other than the default, as TOML (tests load and reload it).
    pub example: &'static str,
    /// What a reload does with it, if not its section's behaviour.
    pub reload: Option<Reload>,
}

/// The value a key has when it is not written.
#[derive(Clone, Copy, Debug)]
pub enum Default {
    /// This TOML value (writing it changes nothing: tested).
    Value(&'static str),
    /// The key must be written.
    Required,
    /// What its absence means, in words.
    Absent(&'static str),
}

/// What `quicknat reload` (or SIGHUP) does with a changed key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// Applied live, sessions kept.
    Live,
    /// The reload is refused, naming the key: restart the gateway to change it.
    Restart,
    /// Read at start only: a reload neither applies nor refuses it.
    Start,
}

impl Reload {
    fn as_str(self) -> &'static str {
        match self {
            Reload::Live => "live",
            Reload::Restart => "restart",
            Reload::Start => "start only",
        }
    }
}

impl Key {
    /// The reload behaviour in force for this key of `section`.
    pub fn reload_in(&self, section: &Section) -> Reload {
        self.reload.unwrap_or(section.reload)
    }

    fn default_text(&self) -> String {
        match self.default {
            Default::Value(v) => format!("`{v}`"),
            Default::Required => "required".to_owned(),
            Default::Absent(what) => what.to_owned(),
        }
    }

    fn meaning_text(&self) -> String {
        if self.rfc.is_empty() {
            self.meaning.to_owned()
        } else {
            format!("{} ({})", self.meaning, self.rfc)
        }
    }
}

impl Section {
    /// The header as written in a file: `[nat44.timeouts]` or `[[nat44.rule]]`.
    pub fn header(&self) -> String {
        if self.array {
            format!("[[{}]]", self.name)
        } else {
            format!("[{}]", self.name)
        }
    }
}

/// What the page says before the sections (markdown).
const INTRO: &str = "\
The configuration file is TOML. It holds one translation mode: `[nat44]` (the default when \
no other mode's section is present), `[nat64]`, `[siit]`, `[clat]` or `[ila]`, with \
`[gateway]` (the live gateway), `[logging]` (NAT event logging) and `[routing]` (route \
announcement) beside it. To run several modes, give `quicknat run` one `--config` per \
interface pair.

Unknown keys are errors, and every error names the file, the line and the field \
(`gw.toml:14: nat44.rule[2].pool: ...`). `quicknat check-config --config FILE` loads a file as \
`quicknat run` would and prints what it sets up and the most memory its tables can take; \
with `--effective` it prints instead every key with the value in force, the defaults below \
filled in, as TOML in this page's order, so two hosts' configurations can be diffed.

The *reload* column says what `quicknat reload` (or SIGHUP) does when the key changes: \
**live**: applied at once, sessions kept; **restart**: the reload is refused, naming the \
key, and the configuration in force stays; **start only**: read when the gateway starts, \
a reload neither applies nor refuses it.
";

/// The configuration reference as the book's markdown page.
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str("# Configuration file\n\n");
    out.push_str(
        "<!-- Generated from crates/quicknat/src/config/reference by \
         `QUICKNAT_BLESS=1 cargo test -p quicknat reference`; do not edit. -->\n\n",
    );
    out.push_str(INTRO);
    out.push_str("\nSections:\n\n");
    for s in SECTIONS {
        let anchor: String = s.name.chars().filter(|c| *c != '.').collect();
        out.push_str(&format!("- [`{}`](#{anchor})\n", s.header()));
    }
    for s in SECTIONS {
        out.push_str(&format!("\n## `{}`\n\n{}\n\n", s.header(), s.about));
        out.push_str(&format!("Modes: {}.\n\n", s.modes));
        out.push_str("| Key | Type | Default | Allowed | Reload | Meaning |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for k in s.keys {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {} |\n",
                k.name,
                cell(k.ty),
                cell(&k.default_text()),
                cell(k.allowed),
                k.reload_in(s).as_str(),
                cell(&k.meaning_text()),
            ));
        }
    }
    out
}

/// Text safe inside a markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The configuration reference as `quicknat.toml(5)`, in roff; `version` goes in the footer.
pub fn man_page(version: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        ".TH QUICKNAT.TOML 5 \"\" \"quicknat {}\" \"File Formats\"\n",
        roff(version)
    ));
    out.push_str(".SH NAME\nquicknat.toml \\- configuration file of the quicknat NAT gateway\n");
    out.push_str(".SH SYNOPSIS\n/etc/quicknat/quicknat.toml\n");
    out.push_str(".SH DESCRIPTION\n");
    for para in INTRO.split("\n\n") {
        out.push_str(&format!(".PP\n{}\n", roff(&plain(para.trim()))));
    }
    for s in SECTIONS {
        out.push_str(&format!(".SH \"{}\"\n", s.header()));
        out.push_str(&format!(
            "{}\nModes: {}.\n",
            roff(&plain(s.about)),
            roff(s.modes)
        ));
        for k in s.keys {
            out.push_str(&format!(".TP\n.B {}\n", k.name));
            let mut facts = vec![k.ty.to_owned(), format!("default: {}", k.default_text())];
            if !k.allowed.is_empty() {
                facts.push(format!("allowed: {}", k.allowed));
            }
            facts.push(format!("reload: {}", k.reload_in(s).as_str()));
            out.push_str(&format!(
                "({})\n.br\n{}\n",
                roff(&plain(&facts.join("; "))),
                roff(&plain(&k.meaning_text()))
            ));
        }
    }
    out.push_str(".SH FILES\n.TP\n/usr/share/doc/quicknat/examples/\nExample configurations, one per mode.\n");
    out.push_str(".SH SEE ALSO\n.BR quicknat (1)\n");
    out
}

/// Markdown's inline marks taken out (backticks, emphasis), line breaks joined.
fn plain(s: &str) -> String {
    s.replace(['`', '*'], "").replace('\n', " ")
}

/// Text safe in a roff line: backslashes escaped, no line starting with a control
/// character.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with(['.', '\'']) {
        format!("\\&{s}")
    } else {
        s
    }
}
