//! `cardinal hll ...`: HyperLogLogs as postgresql-hll hex on the command line.

use std::io::{BufRead, Write};

use anyhow::{Context, Result, bail};
use cardinal_sketch::hll::{Explicit, Hll, Kind, Settings};
use cardinal_sketch::{Sketch, hash};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Read one value per line (a file or stdin) and print the HyperLogLog of
    /// their hashes as postgresql-hll hex.
    #[command(after_help = "Examples:
  seq 1 100000 | cardinal hll build
  seq 1 100000 | cardinal hll build --log2m 14 --regwidth 6
  printf 'alice\\nbob\\n' | cardinal hll build --hash text")]
    Build(BuildArgs),
    /// Print the type, parameters and estimates of each hex value.
    #[command(after_help = "Examples:
  cardinal hll inspect '\\x128B7F004403B7FB05C44A'
  cardinal hll inspect \"$(seq 1 1000 | cardinal hll build)\" \"$(seq 1 100000 | cardinal hll build)\"")]
    Inspect {
        /// Values as `\x...` hex (the `\x` is optional); `-` reads more,
        /// one per line, from stdin.
        #[arg(required = true)]
        values: Vec<String>,
    },
    /// Print the union of the hex values, as hex.
    #[command(after_help = "Examples:
  cardinal hll union \"$(seq 1 500 | cardinal hll build)\" \"$(seq 400 900 | cardinal hll build)\"
  psql -Atc 'SELECT users FROM reach' | cardinal hll union - | cardinal hll inspect -
  cardinal hll inspect \"$(cardinal hll union \"$(seq 1 5000 | cardinal hll build)\" \"$(seq 1 9000 | cardinal hll build)\")\"")]
    Union {
        /// Values as `\x...` hex, all with the same parameters; `-` reads
        /// more, one per line, from stdin.
        #[arg(required = true)]
        values: Vec<String>,
    },
    /// Estimate |A ∩ B|, |A \ B|, |B \ A| and |A ∪ B| by joint maximum
    /// likelihood, with 95% intervals (and inclusion-exclusion beside it).
    #[command(
        visible_alias = "intersect",
        after_help = "Examples:
  cardinal hll overlap \"$(seq 1 60000 | cardinal hll build)\" \"$(seq 40001 100000 | cardinal hll build)\"
  cardinal hll overlap \"$(seq 1 600000 | cardinal hll build --log2m 14 --regwidth 6)\" \\
                       \"$(seq 500001 900000 | cardinal hll build --log2m 14 --regwidth 6)\""
    )]
    Overlap {
        /// Audience A as hex.
        a: String,
        /// Audience B as hex.
        b: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Input file, one value per line; `-` or nothing for stdin.
    input: Option<std::path::PathBuf>,
    /// log2 of the number of registers (4..=31).
    #[arg(long, default_value_t = 11)]
    log2m: u8,
    /// Bits per register (1..=8).
    #[arg(long, default_value_t = 5)]
    regwidth: u8,
    /// Explicit threshold: `auto`, `off`, or a power of two.
    #[arg(long, default_value = "auto")]
    explicit: String,
    /// Never write the SPARSE encoding.
    #[arg(long)]
    no_sparse: bool,
    /// How values are hashed: `bigint` (hll_hash_bigint of a 64-bit integer)
    /// or `text` (hll_hash_text of the line).
    #[arg(long, default_value = "bigint")]
    hash: String,
    /// Hash seed, as in hll_hash_bigint(value, seed).
    #[arg(long, default_value_t = 0)]
    seed: i32,
    /// Allow parameters that java-hll reads but postgresql-hll refuses
    /// (log2m above 17, regwidth 8, explicit thresholds above 16383).
    #[arg(long)]
    java_hll: bool,
}

pub fn run(command: Command) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match command {
        Command::Build(args) => {
            let hll = build(&args)?;
            writeln!(out, "{}", hll.to_hex())?;
        }
        Command::Inspect { values } => {
            for value in with_stdin(values)? {
                let hll = parse(&value)?;
                describe(&mut out, &hll)?;
            }
        }
        Command::Union { values } => {
            let values = with_stdin(values)?;
            let Some((first, rest)) = values.split_first() else {
                bail!("union: stdin held no values");
            };
            let mut union = parse(first)?;
            for value in rest {
                union.merge(&parse(value)?).context("union")?;
            }
            writeln!(out, "{}", union.to_hex())?;
        }
        Command::Overlap { a, b } => {
            let (a, b) = (parse(&a)?, parse(&b)?);
            let overlap = a.intersection(&b).context("intersection")?;
            let text = cardinal_engine::query::overlap_text(&a.estimate(), &b.estimate(), &overlap);
            write!(out, "{text}")?;
        }
    }
    Ok(())
}

/// `values` with a `-` replaced by the lines of stdin (blank ones
/// skipped), so a column of hex from `psql -At` or a file can be piped in.
fn with_stdin(values: Vec<String>) -> Result<Vec<String>> {
    if values.iter().filter(|v| *v == "-").count() > 1 {
        bail!("stdin (`-`) can be named once");
    }
    let mut all = Vec::with_capacity(values.len());
    for value in values {
        if value == "-" {
            for line in std::io::stdin().lock().lines() {
                let line = line.context("reading stdin")?;
                if !line.trim().is_empty() {
                    all.push(line);
                }
            }
        } else {
            all.push(value);
        }
    }
    Ok(all)
}

fn parse(text: &str) -> Result<Hll> {
    Hll::from_hex(text).with_context(|| {
        // A FULL value is kilobytes of hex: its head names it well enough.
        let head: String = text.trim().chars().take(40).collect();
        let more = if text.trim().chars().count() > 40 {
            "..."
        } else {
            ""
        };
        format!("reading {head:?}{more} as a postgresql-hll value")
    })
}

fn build(args: &BuildArgs) -> Result<Hll> {
    let explicit =
        match args.explicit.as_str() {
            "auto" => Explicit::Auto,
            "off" => Explicit::Off,
            n => Explicit::Threshold(n.parse().with_context(|| {
                format!("--explicit {n:?}: expected auto, off or a power of two")
            })?),
        };
    let settings = Settings {
        log2m: args.log2m,
        regwidth: args.regwidth,
        explicit,
        sparse: !args.no_sparse,
        ..Settings::default()
    };
    let mut hll = Hll::new(settings).context("HyperLogLog parameters")?;
    if !args.java_hll {
        settings
            .check_postgresql()
            .context("HyperLogLog parameters (--java-hll writes them for java-hll readers)")?;
    }
    let seed = args.seed as u32; // postgresql-hll takes a negative seed as its u32 bits
    let text = match args.hash.as_str() {
        "bigint" => false,
        "text" => true,
        other => bail!("--hash {other:?}: expected bigint or text"),
    };
    let reader: Box<dyn BufRead> = match &args.input {
        None => Box::new(std::io::stdin().lock()),
        Some(path) if path.as_os_str() == "-" => Box::new(std::io::stdin().lock()),
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        )),
    };
    for (index, line) in reader.lines().enumerate() {
        let line = line.context("reading input")?;
        let hash = if text {
            hash::bytes(line.as_bytes(), seed)
        } else {
            let value: i64 = line.trim().parse().with_context(|| {
                format!(
                    "line {}: {line:?} is not a 64-bit integer (use --hash text)",
                    index + 1
                )
            })?;
            hash::bigint(value, seed)
        };
        hll.insert(hash);
    }
    Ok(hll)
}

fn describe(out: &mut impl Write, hll: &Hll) -> Result<()> {
    let s = hll.settings();
    let kind = match hll.kind() {
        Kind::Undefined => "UNDEFINED",
        Kind::Empty => "EMPTY",
        Kind::Explicit => "EXPLICIT",
        Kind::Sparse => "SPARSE",
        Kind::Full => "FULL",
    };
    writeln!(out, "{}", hll.to_hex())?;
    writeln!(
        out,
        "  type {kind}, log2m {}, regwidth {}, explicit {:?}, sparse {}",
        s.log2m, s.regwidth, s.explicit, s.sparse
    )?;
    match hll.cardinality() {
        Some(c) => writeln!(out, "  hll_cardinality {c}")?,
        None => writeln!(out, "  hll_cardinality NULL")?,
    }
    writeln!(out, "  estimate        {}", hll.estimate())?;
    Ok(())
}
