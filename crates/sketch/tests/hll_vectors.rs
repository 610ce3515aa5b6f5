//! Cross-implementation vectors for the AK HyperLogLog format: every file of
//! postgresql-hll's and go-hll's test data (made by java-hll's
//! `IntegrationTestGenerator`), read in place from `../shared/vectors/hll`.
//!
//! Bytes must be identical and cardinalities within 1e-9 relative (platforms
//! differ in the last bit of `log`; upstream rounds to 10 decimals).
//!
//! If the folder is missing the tests print a warning and pass, so the crate
//! can be tested on its own; CI sets `CARDINAL_REQUIRE_VECTORS=1`, which makes
//! a missing folder a failure. Set `CARDINAL_HLL_VECTORS` to read them from
//! elsewhere.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use cardinal_sketch::Sketch;
use cardinal_sketch::hll::{Hll, MaxSparse};

fn vectors_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CARDINAL_HLL_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/vectors/hll")
        });
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CARDINAL_REQUIRE_VECTORS").is_none(),
        "HLL vectors required but {} is missing",
        dir.display()
    );
    eprintln!(
        "warning: {} is missing; HLL vector tests skipped",
        dir.display()
    );
    None
}

/// The rows of a CSV file (plain or gzip), header dropped.
fn rows(path: &Path) -> Vec<Vec<String>> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let rows: Vec<Vec<String>> = BufReader::new(reader)
        .lines()
        .skip(1)
        .map(|line| {
            line.expect("readable line")
                .split(',')
                .map(str::to_owned)
                .collect()
        })
        .collect();
    assert!(!rows.is_empty(), "{} has no rows", path.display());
    rows
}

fn hex(text: &str) -> Vec<u8> {
    let digits = text.strip_prefix("\\x").expect("\\x prefix");
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex"))
        .collect()
}

fn assert_cardinality(hll: &Hll, expected: &str, context: &str) {
    let expected: f64 = expected
        .parse()
        .unwrap_or_else(|_| panic!("{context}: bad {expected}"));
    let found = hll.cardinality().expect("not UNDEFINED");
    if expected.is_nan() {
        assert!(
            found.is_nan(),
            "{context}: cardinality {found}, expected NaN"
        );
        return;
    }
    let tolerance = 1e-9 * expected.abs().max(1.0);
    assert!(
        (found - expected).abs() <= tolerance,
        "{context}: cardinality {found}, expected {expected}"
    );
}

/// `cumulative_add_*`: row 1 is the start; each later row adds `raw_value`.
fn check_add(path: &Path, max_sparse: MaxSparse) -> usize {
    let rows = rows(path);
    let mut hll = Hll::decode_with(&hex(&rows[0][2]), max_sparse).expect("row 1 decodes");
    assert_cardinality(&hll, &rows[0][0], &format!("{} row 1", path.display()));
    for (i, row) in rows.iter().enumerate().skip(1) {
        let context = format!("{} row {}", path.display(), i + 1);
        let raw: i64 = row[1].parse().expect("raw_value");
        hll.insert(raw as u64);
        let expected = hex(&row[2]);
        assert_eq!(
            hll.to_hex(),
            row[2].to_ascii_lowercase(),
            "{context}: bytes"
        );
        assert_cardinality(&hll, &row[0], &context);
        // The expected bytes decode to a sketch that encodes back to them.
        let decoded = Hll::decode_with(&expected, max_sparse).expect("expected bytes decode");
        assert_eq!(
            decoded.encode(),
            expected,
            "{context}: decode/encode of the expected bytes"
        );
    }
    rows.len()
}

/// `cumulative_union_*`: union of the previous union with this row's value.
fn check_union(path: &Path, max_sparse: MaxSparse) -> usize {
    let rows = rows(path);
    let mut folded: Option<Hll> = None;
    let mut previous_union: Option<Vec<u8>> = None;
    for (i, row) in rows.iter().enumerate() {
        let context = format!("{} row {}", path.display(), i + 1);
        let value = Hll::decode_with(&hex(&row[1]), max_sparse).expect("multiset decodes");
        // No byte check on the input itself: java-hll wrote some inputs FULL
        // where the postgresql-hll rule would write SPARSE.
        assert_cardinality(&value, &row[0], &context);

        let mut union = match &previous_union {
            Some(bytes) => Hll::decode_with(bytes, max_sparse).expect("previous union decodes"),
            None => value.clone(),
        };
        if previous_union.is_some() {
            union.merge(&value).expect("same parameters");
        }
        assert_eq!(
            union.to_hex(),
            row[3].to_ascii_lowercase(),
            "{context}: union bytes"
        );
        assert_cardinality(&union, &row[2], &format!("{context} (union)"));

        // Upstream's second check: folding every multiset from row 1 gives the
        // same union, with our in-memory state carried across rows.
        let folded = folded.get_or_insert_with(|| value.clone());
        if i > 0 {
            folded.merge(&value).expect("same parameters");
        }
        assert_eq!(
            folded.to_hex(),
            row[3].to_ascii_lowercase(),
            "{context}: folded union bytes"
        );
        previous_union = Some(hex(&row[3]));
    }
    rows.len()
}

fn check_dir(dir: &Path, max_sparse: MaxSparse) -> usize {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable vector dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().contains("cumulative_"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vector files in {}", dir.display());
    let mut total = 0;
    for file in &files {
        let name = file
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        let max_sparse = if name.contains("cardinality_correction") {
            MaxSparse::Registers(0)
        } else {
            max_sparse
        };
        let count = if name.contains("cumulative_add_") {
            check_add(file, max_sparse)
        } else {
            check_union(file, max_sparse)
        };
        eprintln!("{name}: {count} rows ok");
        total += count;
    }
    total
}

#[test]
fn postgresql_hll_vectors() {
    let Some(dir) = vectors_dir() else { return };
    let rows = check_dir(&dir.join("postgresql-hll"), MaxSparse::Registers(512));
    assert!(rows > 1000, "only {rows} rows checked");
}

#[test]
fn go_hll_log2m_10_regwidth_4() {
    let Some(dir) = vectors_dir() else { return };
    check_dir(
        &dir.join("go-hll/log2m-10_regwidth-4"),
        MaxSparse::Registers(850),
    );
}

#[test]
fn go_hll_log2m_11_regwidth_5() {
    let Some(dir) = vectors_dir() else { return };
    check_dir(
        &dir.join("go-hll/log2m-11_regwidth-5"),
        MaxSparse::Registers(850),
    );
}

#[test]
fn go_hll_log2m_12_regwidth_6() {
    let Some(dir) = vectors_dir() else { return };
    check_dir(
        &dir.join("go-hll/log2m-12_regwidth-6"),
        MaxSparse::Registers(850),
    );
}

#[test]
fn murmur_vectors() {
    let Some(dir) = vectors_dir() else { return };
    let bigint = rows(&dir.join("postgresql-hll/murmur_bigint.csv"));
    assert_eq!(bigint.len(), 600);
    for row in &bigint {
        let seed: u32 = row[0].parse().expect("seed");
        let value: i64 = row[1].parse().expect("pre_hash_long");
        let expected: i64 = row[2].parse().expect("post_hash_long");
        assert_eq!(
            cardinal_sketch::hash::bigint(value, seed) as i64,
            expected,
            "{row:?}"
        );
    }
    let bytea = rows(&dir.join("postgresql-hll/murmur_bytea.csv"));
    assert_eq!(bytea.len(), 600);
    for row in &bytea {
        let seed: u32 = row[0].parse().expect("seed");
        let expected: i64 = row[2].parse().expect("post_hash_long");
        assert_eq!(
            cardinal_sketch::hash::bytes(&hex(&row[1]), seed) as i64,
            expected,
            "{row:?}"
        );
    }
}
