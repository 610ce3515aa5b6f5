//! cardinal's SQL dialect, compiled to plans that route records to
//! summaries.
//!
//! `sources -> decode -> route -> summarize -> store -> query`: this crate
//! is the route stage. It reads the declarations (`CREATE STREAM`, `CREATE
//! SUMMARY`, `CREATE ATTRIBUTION`; see `docs/sql.md`) with the `sqlparser`
//! crate, resolves and type-checks them into a [`Plan`], and evaluates each
//! [`Summary`]'s filter, time bucket, dimension keys and aggregate arguments
//! over a [`Record`] without allocating.
//!
//! - [`Plan::compile`] (or [`Declarations::parse`] then
//!   [`Declarations::compile`]): text to plan; every mistake is an
//!   [`Error`] that quotes the text with line, column and a caret.
//! - [`Stream`]: a declared input: [`Schema`], [`Format`], time column.
//! - [`Summary`]: what one summary reads, keeps and aggregates;
//!   [`Summary::route`] evaluates it over one record into a reused
//!   [`Routed`].
//! - [`Expr`]: a compiled expression; [`Expr::eval`] gives a borrowed
//!   [`Value`], with [`Scratch`] holding the bytes `lower`/`upper` make.
//! - [`Attribution`]: a typed attribution declaration (executed by the
//!   binary over `cardinal-chains`); its credit rows form a stream of
//!   their own ([`CREDIT_COLUMNS`]) that summaries read.
//!
//! ```
//! use cardinal_route::{AggregateKind, OutputSource, Plan, Routed, Scratch};
//! use cardinal_event::{TimeUnit, Timestamp};
//!
//! let plan = Plan::compile(
//!     "CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
//!        site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
//!        WITH (format = 'csv', header = true, time = 'ts');
//!
//!      CREATE SUMMARY reach AS
//!        SELECT date_trunc('day', ts) AS day, state,
//!               count(*) AS events, sum(revenue) AS revenue, hll(user_id) AS users
//!        FROM impressions WHERE kind = 'impression'
//!        GROUP BY day, state;",
//! )?;
//! let reach = &plan.summaries[0];
//! assert_eq!(reach.bucket.map(|b| b.unit), Some(TimeUnit::Day));
//! assert_eq!(reach.dimensions.len(), 1);
//! assert_eq!(reach.reads, [0, 1, 2, 3, 7]); // site, provider, campaign are skipped
//! assert!(matches!(reach.aggregates[2].kind, AggregateKind::Hll { log2m: 11, regwidth: 5 }));
//! assert_eq!(reach.outputs[0].source, OutputSource::Bucket);
//!
//! let row: &[&str] = &["2026-11-04T13:45:59Z", "42", "impression", "CA", "s", "p", "c", "0.25"];
//! let mut scratch = Scratch::new();
//! let mut routed = Routed::default();
//! assert_eq!(reach.route(row, &mut scratch, &mut routed), Ok(true));
//! assert_eq!(routed.bucket, Some(Timestamp::parse(b"2026-11-04")?));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// Dependencies: `cardinal-event`, `cardinal-sketch` (its limits validate
// aggregate parameters, its hashes are applied once per argument),
// `sqlparser` without default features, and `thiserror`. sqlparser's
// `recursive-protection` feature pulls a C build; instead `EXPR_DEPTH_MAX`,
// checked on the tokens and on the parsed tree before any recursive walk,
// bounds nesting (chains such as `a + b + ...` included), with
// `EXPR_OPERATORS_MAX` and `DECLARATION_BYTES_MAX` beside it. A change to
// sqlparser's tree shapes must keep those checks ahead of every walk.

#![deny(missing_docs)]

mod cache;
mod canonical;
mod compile;
mod error;
mod expr;
mod name;
mod parse;
mod route;
mod select;

pub use cache::{Cached, ColumnCache};
pub use cardinal_event::{Record, Schema, TimeUnit, Value};
pub use compile::epoch_instant;
pub use error::{Error, EvalError, Result};
pub use expr::{ArithOp, CaseOp, CompareOp, Expr, Literal, MathOp, Scratch, Type};
pub use name::{NAME_CHARS_MAX, check_name, is_name_char};
pub use parse::Declarations;
pub use route::{
    Arg, ArgColumn, ColumnFilter, ColumnPlan, KeyColumn, KeyValues, Routed, encode_key_value,
    key_values,
};
pub use select::{compile_expr, error_at, parse_query, span_of_expr};
/// The SQL tree queries are parsed into ([`parse_query`]).
pub use sqlparser;

/// The longest declaration script accepted. Declarations are written by
/// people; 1 MiB is far beyond any real one, and bounds what the parser and
/// the compiled plan can hold.
pub const DECLARATION_BYTES_MAX: usize = 1 << 20;

/// The longest SQL query answered: 256 KiB. Grafana's and BI tools'
/// generated queries are a few KiB; an `IN` list of ten thousand names
/// fits. A bound on what one request makes the parser read.
pub const QUERY_BYTES_MAX: usize = 256 << 10;

/// The largest `k` of `topk(x, k)`: the rollup keeps about 4k candidates
/// per group, within the sketch's `countmin::CAPACITY_MAX`. Checked when a
/// declaration compiles, so that a plan never fails later in the rollup
/// (whose `TOPK_K_MAX` is the same value; the binary's tests check it).
pub const TOPK_K_MAX: u32 = 1_000;

/// The most bytes one aggregate's state may take in one group, at its
/// largest: 16 MiB. A HyperLogLog grows to one byte per register, so
/// `hll(x, log2m)` is refused above log2m 24 (the format goes to 31, 2 GiB
/// per group); `theta(x, 20)` fills up to 16 MiB. Checked when a
/// declaration compiles, so that one group cannot exhaust memory later.
pub const GROUP_STATE_BYTES_MAX: u64 = 16 << 20;

/// The most ranks one `approx_quantile(x, q, ...)` may ask for (the
/// rollup's `RANKS_MAX`, checked at compile time for the same reason).
pub const RANKS_MAX: usize = 8;

/// How deeply expressions may nest: the levels of an expression's tree,
/// where every operator of a chain such as `a + b + c` is one level, as
/// every parenthesis and call is; operands are not levels. The parser
/// refuses nesting past it from the tokens, sets sqlparser's recursion
/// limit two above it as a guard, and measures the tree sqlparser returns,
/// without recursion, before anything walks it. So it bounds every
/// recursive walk over an expression: compiling, type checking,
/// evaluating, printing and dropping. At 48 levels sqlparser's recursive descent needs the most
/// stack, up to about 16 KiB a level on nested calls (47 nested
/// `coalesce(` parsed in 768 KiB, dev profile, x86-64, 2026-11-27): well
/// inside a spawned thread's 2 MiB and a main thread's 8 MiB. The walks
/// over compiled plans are tested on 256 KiB.
pub const EXPR_DEPTH_MAX: usize = 48;

/// The most operators, keywords and parentheses the tokens of one
/// expression may nest along one path (between commas, at each level of
/// parentheses), counted from the tokens before sqlparser builds any tree.
/// sqlparser builds a chain such as `a + b + c` in a loop, one level per
/// operator, and drops what it built recursively when a later token is
/// wrong; this bound keeps those trees a few hundred levels deep at most
/// (their drops and walks need a few KiB a level) until
/// [`EXPR_DEPTH_MAX`] is measured on them. Every expression within
/// [`EXPR_DEPTH_MAX`] written the usual way (a comparison per condition,
/// a literal or column per operand) stays well under it.
pub const EXPR_OPERATORS_MAX: usize = 256;
const _: () = assert!(EXPR_OPERATORS_MAX >= 4 * EXPR_DEPTH_MAX);

/// Every declaration in a script, compiled.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// `CREATE STREAM`s, in order.
    pub streams: Vec<Stream>,
    /// `CREATE SUMMARY`s, in order.
    pub summaries: Vec<Summary>,
    /// `CREATE ATTRIBUTION`s, in order.
    pub attributions: Vec<Attribution>,
}

impl Plan {
    /// Parses and compiles a script of declarations.
    pub fn compile(sql: &str) -> Result<Self> {
        Declarations::parse(sql)?.compile()
    }
}

/// How a stream's records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Delimited text (the v1 CSV).
    Csv,
    /// Newline-delimited JSON objects, possibly nested (v2).
    Json,
    /// The AMPLab benchmark tables: comma-separated, no header, Java floats.
    Amplab,
    /// Parquet files: columns matched to declared columns by name, typed
    /// values read without text.
    Parquet,
}

/// A declared input stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    /// Its name.
    pub name: String,
    /// Its columns; for JSON each carries its key path.
    pub schema: Schema,
    /// How its records are written.
    pub format: Format,
    /// Whether delimited input starts with a header line.
    pub header: bool,
    /// The event-time column (a TIMESTAMP), if declared.
    pub time: Option<usize>,
    /// The field separator of delimited input (`,` unless declared).
    pub delimiter: u8,
    /// For the credit stream of an attribution, the attribution's index in
    /// [`Plan::attributions`]. Such a stream is not read from inputs: its
    /// records are the attribution's credit rows (columns
    /// [`CREDIT_COLUMNS`]), and summaries read it like any other stream.
    pub credit_of: Option<usize>,
}

/// The columns of an attribution's credit stream, one row per credited
/// touch point: when the conversion happened, when the touch point did, the
/// user (a TEXT user column's 64-bit hash), the touch point's campaign and
/// site, the model's name, the touch point's share of the conversion, and
/// that share of the conversion's value.
pub const CREDIT_COLUMNS: [(&str, cardinal_event::ColumnType); 8] = {
    use cardinal_event::ColumnType::{BigInt, Double, Text, Timestamp};
    [
        ("conversion_ts", Timestamp),
        ("touch_ts", Timestamp),
        ("user_id", BigInt),
        ("campaign", Text),
        ("site", Text),
        ("model", Text),
        ("credit", Double),
        ("revenue", Double),
    ]
};

/// A summary's time bucket: `date_trunc(unit, time column)` or
/// `time_bucket(width, time column)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// The bucket width: a calendar unit (`date_trunc`), or
    /// [`TimeUnit::Fixed`] for `time_bucket`, a whole number of seconds
    /// that divides a day (so a bucket never spans two UTC days).
    pub unit: TimeUnit,
    /// The stream's time column.
    pub column: usize,
}

/// What an aggregate computes, with its parameters (already validated
/// against the sketch crate's limits).
#[derive(Debug, Clone, PartialEq)]
pub enum AggregateKind {
    /// `count(*)`: records.
    CountAll,
    /// `count(x)`: records where `x` is not NULL.
    Count,
    /// `sum(x)` of a DOUBLE.
    Sum,
    /// `sum(x)` of a BIGINT: an exact integer, as PostgreSQL's `numeric`
    /// and DuckDB's `HUGEINT` sums are.
    SumInt,
    /// `min(x)` of a DOUBLE or TIMESTAMP.
    Min,
    /// `min(x)` of a BIGINT, exact.
    MinInt,
    /// `max(x)` of a DOUBLE or TIMESTAMP.
    Max,
    /// `max(x)` of a BIGINT, exact.
    MaxInt,
    /// `avg(x)`.
    Avg,
    /// `hll(x [, log2m [, regwidth]])`: HyperLogLog distinct count.
    Hll {
        /// log2 of the register count.
        log2m: u8,
        /// Bits per register.
        regwidth: u8,
    },
    /// `exact_distinct(x)`: a Roaring set (text is hashed to 64 bits).
    ExactDistinct,
    /// `quantiles(x [, k])` or `approx_quantile(x, q, ...)`: KLL.
    Quantiles {
        /// KLL accuracy parameter.
        k: u16,
        /// The ranks to report (`approx_quantile`); empty for the sketch.
        ranks: Vec<f64>,
    },
    /// `topk(x, k)`: heavy hitters.
    TopK {
        /// How many items to report.
        k: u32,
    },
    /// `theta(x [, lg_k])`: Theta sketch.
    Theta {
        /// log2 of the nominal entries.
        lg_k: u8,
    },
}

impl AggregateKind {
    /// Whether the aggregate consumes a 64-bit hash of its argument (see
    /// [`Arg::hash`]) rather than its value.
    pub fn takes_hash(&self) -> bool {
        matches!(
            self,
            AggregateKind::Hll { .. } | AggregateKind::Theta { .. } | AggregateKind::TopK { .. }
        )
    }
}

/// One aggregate of a summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// What it computes.
    pub kind: AggregateKind,
    /// Its argument: an index into [`Summary::arguments`] (shared by
    /// aggregates over the same expression, so `hll(user_id)` and
    /// `theta(user_id)` read and hash the id once), or `None` for
    /// `count(*)`.
    pub argument: Option<usize>,
}

/// Where an output column's values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputSource {
    /// The time bucket's start.
    Bucket,
    /// [`Summary::dimensions`]`[i]`.
    Dimension(usize),
    /// [`Summary::aggregates`]`[i]`.
    Aggregate(usize),
}

/// One column of a summary's result, in select-list order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The `AS` name, or the expression's text.
    pub name: String,
    /// Its source.
    pub source: OutputSource,
}

/// A compiled `CREATE SUMMARY`.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Its name.
    pub name: String,
    /// Index of its stream in [`Plan::streams`].
    pub stream: usize,
    /// The stream's schema.
    pub schema: Schema,
    /// The columns it reads, ascending, so that parsers can skip others.
    pub reads: Vec<usize>,
    /// The `WHERE` condition.
    pub filter: Option<Expr>,
    /// The time bucket, if a group key is `date_trunc` or `time_bucket`
    /// over the stream's time column.
    pub bucket: Option<Bucket>,
    /// The other group keys.
    pub dimensions: Vec<Expr>,
    /// The static type of each of [`Summary::dimensions`], as the
    /// compiler checked it ([`Summary::dimension_schema`]).
    pub dimension_types: Vec<Type>,
    /// The distinct aggregate argument expressions.
    pub arguments: Vec<Expr>,
    /// The aggregates.
    pub aggregates: Vec<Aggregate>,
    /// The result columns, in select-list order.
    pub outputs: Vec<Output>,
    /// How [`Summary::route_passed`] evaluates each dimension and
    /// argument: byte-level paths for the common shapes, decided once here
    /// rather than matched against the expression trees per record.
    pub(crate) paths: route::Paths,
}

impl Summary {
    /// Whether aggregate `i`'s values are instants: `min` and `max` of a
    /// time (a TIMESTAMP or DATE column, `date_trunc`, a `coalesce` of
    /// them). The rollup keeps them as milliseconds since the epoch;
    /// outputs print them as timestamps.
    pub fn aggregate_is_time(&self, i: usize) -> bool {
        let Some(aggregate) = self.aggregates.get(i) else {
            return false;
        };
        matches!(aggregate.kind, AggregateKind::Min | AggregateKind::Max)
            && aggregate
                .argument
                .and_then(|a| self.arguments.get(a))
                .is_some_and(Expr::is_time)
    }
}

/// An attribution model (issue 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// All credit to the last touch point.
    LastTouch,
    /// All credit to the first touch point.
    FirstTouch,
    /// Equal credit to every touch point.
    Linear,
    /// Credit halving every `half_life_days` before the conversion.
    TimeDecay {
        /// The half-life (7 days unless declared).
        half_life_days: u32,
    },
    /// 40% first, 40% last, 20% shared by the middle.
    PositionBased,
}

impl Model {
    /// The model's name as declared (`linear`, `time_decay`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Model::LastTouch => "last_touch",
            Model::FirstTouch => "first_touch",
            Model::Linear => "linear",
            Model::TimeDecay { .. } => "time_decay",
            Model::PositionBased => "position_based",
        }
    }
}

/// A compiled `CREATE ATTRIBUTION`: which records are touch points and
/// conversions, whose they are, what a touch point keeps, and how a
/// conversion's credit is shared.
#[derive(Debug, Clone, PartialEq)]
pub struct Attribution {
    /// Its name, also the name of its credit stream.
    pub name: String,
    /// Index of the stream it reads in [`Plan::streams`].
    pub stream: usize,
    /// Index of its credit stream (columns [`CREDIT_COLUMNS`]) in
    /// [`Plan::streams`].
    pub credit_stream: usize,
    /// The user id column: BIGINT, or TEXT (hashed to 64 bits).
    pub user: usize,
    /// The stream's event-time column.
    pub time: usize,
    /// How credit is shared.
    pub model: Model,
    /// Touch points older than this before a conversion get no credit.
    pub lookback_days: u32,
    /// Which records are touch points (a condition).
    pub touch: Expr,
    /// Which records are conversions (a condition). A record that is both
    /// is a conversion.
    pub conversion: Expr,
    /// A conversion's value (BIGINT or DOUBLE); `None`: no revenue.
    pub value: Option<Expr>,
    /// A touch point's campaign (TEXT or BIGINT).
    pub campaign: Option<Expr>,
    /// A touch point's site (TEXT or BIGINT).
    pub site: Option<Expr>,
}
