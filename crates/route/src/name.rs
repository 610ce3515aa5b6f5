//! The names of streams, summaries and attributions.
//!
//! A declared name becomes a file or folder name: `--out DIR` writes
//! `DIR/<summary>/`, `--chains-snapshot DIR` writes `DIR/<attribution>.chains`
//! and `.names`, and a server will key its tables by them. So a name is held
//! to what is a safe, portable single path component on every file system we
//! write to:
//!
//! - ASCII letters, digits, `_` and `-` ([`is_name_char`]), so there is no
//!   separator, no `.` or `..`, no control character, nothing a shell or a
//!   URL must escape, and case folding is the plain ASCII one;
//! - a letter, digit or `_` first, so a name never reads as a flag;
//! - 1 to [`NAME_CHARS_MAX`] characters.
//!
//! Two names that differ only in case are the same name (the compiler
//! refuses the second), because a case-insensitive file system would put
//! them in one folder.
//
// Every writer of a path made from a name also refuses a name that would
// leave its directory (`cardinal_export::join_under`), so that a plan built
// by hand, not by the compiler, cannot write outside it either. Widening the
// character set here means checking that function too.

/// The longest name, in characters (ASCII, so also bytes). It keeps
/// `<name>.chains` and `YYYY-MM-DD.csv` paths far below the usual 255-byte
/// file name limit, and names readable in tables and messages.
pub const NAME_CHARS_MAX: usize = 64;

/// Whether `c` may appear in a name (see the module doc).
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Checks `name` against the rules of the module doc. The error says what
/// is wrong and what is accepted.
pub fn check_name(name: &str) -> Result<(), String> {
    let Some(first) = name.chars().next() else {
        return Err(format!("a name must not be empty; {NAME_RULES}"));
    };
    let chars = name.chars().count();
    if chars > NAME_CHARS_MAX {
        return Err(format!(
            "the name is {chars} characters long; the limit is {NAME_CHARS_MAX} (NAME_CHARS_MAX)"
        ));
    }
    if let Some(c) = name.chars().find(|&c| !is_name_char(c)) {
        let shown = if c.is_control() || c.is_whitespace() {
            format!("{c:?}")
        } else {
            format!("'{c}'")
        };
        return Err(format!("a name cannot hold {shown}; {NAME_RULES}"));
    }
    if first == '-' {
        return Err(format!("a name cannot start with '-'; {NAME_RULES}"));
    }
    debug_assert!(name.chars().all(is_name_char));
    debug_assert!(name != "." && name != "..");
    Ok(())
}

const NAME_RULES: &str =
    "names are 1 to 64 ASCII letters, digits, '_' and '-', not starting with '-'";

const _: () = assert!(NAME_CHARS_MAX == 64, "NAME_RULES spells the limit out");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass() {
        for name in [
            "a",
            "by_day",
            "Reach-7",
            "_x",
            "0day",
            &"n".repeat(NAME_CHARS_MAX),
        ] {
            assert_eq!(check_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn path_like_names_fail() {
        for name in [
            "", ".", "..", "../../x", "/tmp/x", "./a", "a/b", "a\\b", "a\0b", "a b", "a\nb", "-a",
            "é", "C:x",
        ] {
            assert!(check_name(name).is_err(), "{name:?}");
        }
        assert!(check_name(&"n".repeat(NAME_CHARS_MAX + 1)).is_err());
    }
}
