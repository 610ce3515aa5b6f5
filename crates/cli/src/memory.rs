//! `--memory-max`: the bytes a run's rollups may hold, read from the flag
//! or derived from the machine.
//!
//! The engine counts what the rollups hold (groups, keys, states and each
//! sketch's own heap, `cardinal_rollup::MemoryBudget`) and stops the run
//! with an error naming the summary that holds the most (`budget_error` in
//! `crates/engine/src/batch.rs`) before the allocator fails: the process
//! never dies of an allocation failure because a summary grew without
//! bound. The default leaves room for what the count does not hold (chunk
//! buffers, held-back records, the merge's copy of the partials, the
//! allocator's slack).

use std::path::Path;

/// The share of the machine's memory the rollups may hold by default: one
/// over this. The merge can need up to the partials' bytes again, and the
/// rest of the process (buffers, the allocator's slack) needs some too.
pub const MEMORY_SHARE_DIVISOR: u64 = 2;

/// The least `--memory-max`: below it a single large sketch (a Count-Min
/// of a `topk`, a Theta at its largest `lg_k`) would not fit.
pub const MEMORY_MAX_MIN: u64 = 1 << 20;

/// The default budget when the machine's memory cannot be read (no
/// `/proc/meminfo`): 4 GiB.
pub const MEMORY_MAX_FALLBACK: u64 = 4 << 30;

/// The default `--memory-max`: [`MEMORY_SHARE_DIVISOR`]th of the least of
/// the physical memory (`MemTotal`), the cgroup's limit (v2
/// `memory.max`, v1 `memory.limit_in_bytes`) and the address-space limit
/// (`ulimit -v`), whichever are set.
pub fn memory_max_default() -> u64 {
    let limits = [
        meminfo_total(),
        read_number(Path::new("/sys/fs/cgroup/memory.max")),
        read_number(Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes")),
        address_space_max(),
    ];
    limits
        .into_iter()
        .flatten()
        .min()
        .map_or(MEMORY_MAX_FALLBACK, |bytes| bytes / MEMORY_SHARE_DIVISOR)
        .max(MEMORY_MAX_MIN)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn meminfo_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A file holding one number of bytes (`max`, unlimited, reads as none).
fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The soft `Max address space` of `/proc/self/limits`, in bytes.
fn address_space_max() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Reads `--memory-max`: bytes, or a number with a binary unit (`K`, `M`,
/// `G`, `T`, alone or followed by `iB` or `B`: `512MiB`, `2G`), at least
/// [`MEMORY_MAX_MIN`].
pub fn memory_arg(text: &str) -> Result<u64, String> {
    let digits = text
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text.trim()[digits.len()..];
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "unknown unit {unit:?}: expected K, M, G or T (binary)"
            ));
        }
    };
    let bytes = digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("expected a size such as 512MiB or 2G, not {text:?}"))?;
    if bytes < MEMORY_MAX_MIN {
        return Err(format!(
            "{text} is below the least budget, 1 MiB (MEMORY_MAX_MIN)"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(memory_arg("64MiB"), Ok(64 << 20));
        assert_eq!(memory_arg("2G"), Ok(2 << 30));
        assert_eq!(memory_arg("1048576"), Ok(1 << 20));
        assert_eq!(memory_arg("3gb"), Ok(3 << 30));
        assert!(memory_arg("1K").is_err(), "below the least");
        assert!(memory_arg("12Q").is_err());
        assert!(memory_arg("MiB").is_err());
        assert!(memory_arg("99999999999T").is_err(), "overflows");
    }

    #[test]
    fn the_default_is_a_share_of_the_machine() {
        let default = memory_max_default();
        assert!(default >= MEMORY_MAX_MIN);
        if let Some(total) = meminfo_total() {
            assert!(
                default <= total / MEMORY_SHARE_DIVISOR,
                "{default} of {total}"
            );
        }
    }
}
