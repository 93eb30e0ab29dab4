//! Port-block allocation (`port_block_size`, `blocks_per_subscriber`) of `[nat44]` and
//! `[nat64]`, read and bounded here so that both sections say the same thing the same way;
//! that a block fits each rule's port range is the engine's check, located like any other.

use toml::Spanned;

use super::{ConfigFileError, Source};

/// Smallest block (besides 0, off), as the engine has it.
const MIN_SIZE: u64 = engine::nat44::config::MIN_PORT_BLOCK_SIZE as u64;
/// Largest block: half of the port space.
const MAX_SIZE: u64 = 32_768;
/// Most blocks one subscriber may hold.
const MAX_PER: u64 = conntrack::pool::MAX_BLOCKS_PER_SUBSCRIBER as u64;

/// The settings written in `[section]`, each checked (`None`: not written, keep the
/// default); an error names the field and its line.
pub(super) fn port_blocks(
    src: &Source<'_>,
    size: &Option<Spanned<u64>>,
    per: &Option<Spanned<u64>>,
    section: &str,
) -> Result<(Option<u16>, Option<u16>), ConfigFileError> {
    let check = |v: &Option<Spanned<u64>>, field: &str, ok: &dyn Fn(u64) -> bool, why: &str| {
        v.as_ref()
            .map(|m| {
                Some(*m.get_ref())
                    .filter(|n| ok(*n))
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| {
                        src.error(
                            Some(m.span()),
                            format!("{section}.{field}"),
                            format!("{}: {why}", m.get_ref()),
                        )
                    })
            })
            .transpose()
    };
    Ok((
        check(
            size,
            "port_block_size",
            &|n| n == 0 || (MIN_SIZE..=MAX_SIZE).contains(&n),
            &format!("must be 0 (off) or between {MIN_SIZE} and {MAX_SIZE}"),
        )?,
        check(
            per,
            "blocks_per_subscriber",
            &|n| (1..=MAX_PER).contains(&n),
            &format!("must be between 1 and {MAX_PER}"),
        )?,
    ))
}
