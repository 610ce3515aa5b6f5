//! The issue 4 workload against the chain store, and the same workload
//! against hashbrown's `HashMap<u64, Vec<u8>>` and Redis `APPEND`.
//!
//! Keys are Zipf (s = 1.1) ranks over an id space of `--ids` users, shuffled
//! by a bijective mix so hot users are spread over the shards; records are
//! 16-64 bytes; `--conversion-permille` of the operations are conversions
//! (take the chain, attribute it linearly, free it); a virtual clock runs at
//! 200,000 appends per second and a trim slice of `--trim-budget` index
//! slots runs every `--trim-every` appends.
//!
//! Every 1M appends it prints wall and thread-CPU throughput, live keys,
//! RSS and bytes per key; at the end a latency histogram per operation
//! cause (append, chain move, shard growth, trim slice, emit) with counts
//! over 100 us and 1 ms, and optionally the snapshot write and restore speed.
//!
//! ```text
//! cargo run --release -p cardinal-chains --example chains_bench -- \
//!     --mode chains --ids 200000000 --appends 300000000
//! ```
//!
//! Run by `bench/chains/run.sh`, never by tests.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cardinal_chains::attribution::{self, Conversion, Model};
use cardinal_chains::{
    AppendOutcome, CampaignId, Config, KeyIndex, Kind, Record, SiteId, Store, TrimOutcome, UserId,
};

const REPORT_EVERY: u64 = 1_000_000;
const APPENDS_PER_SECOND: u64 = 200_000;

struct Args {
    mode: String,
    ids: u64,
    appends: u64,
    conversion_permille: u64,
    lookback_s: u64,
    trim_every: u64,
    trim_budget: u64,
    keys_max: u64,
    snapshot: Option<PathBuf>,
    port: u16,
    seed: u64,
    /// Time each operation by the thread's CPU clock instead of the wall
    /// clock: preemption on a shared machine then does not count, at ~0.4 us
    /// of system call per reading.
    cpu_clock: bool,
    /// `op`: one `append` per operation, each timed (the latency
    /// histograms); `batch`: `append_batch` over batches of 64 operations,
    /// each batch timed by the thread CPU clock and the generator timed
    /// apart (the throughput).
    timing: String,
    /// Per mille of operations that are a brand-new user (see `Users`); 0
    /// draws every user from Zipf over `--ids`.
    new_user_permille: u64,
    report_every: u64,
    /// `control` mode: GiB of memory the fixed-work batches touch.
    control_gib: u64,
    /// `control` mode: random read-modify-writes per batch (448: a batch
    /// takes about as long as the store's median batch, ~20 us).
    control_ops: u64,
    /// `control` mode: advise the buffer for transparent huge pages (as
    /// the store's arena and large index tables are).
    control_thp: bool,
    /// Write every timed operation of at least `slow_us` to this file (op
    /// number, cause, ns): the runs are deterministic, so joining the logs
    /// of repeated runs (`bench/chains/repeat.py`) tells an operation's own
    /// work from time the machine took.
    slow_log: Option<PathBuf>,
    slow_us: u64,
}

fn parse_args() -> Args {
    let mut args = Args {
        mode: "chains".into(),
        ids: 20_000_000,
        appends: 50_000_000,
        conversion_permille: 15,
        lookback_s: 1800,
        trim_every: 256,
        trim_budget: 256,
        keys_max: 0,
        snapshot: None,
        port: 0,
        seed: 1,
        cpu_clock: false,
        timing: "op".into(),
        new_user_permille: 0,
        report_every: REPORT_EVERY,
        control_gib: 16,
        control_ops: 448,
        control_thp: false,
        slow_log: None,
        slow_us: 100,
    };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    for pair in raw.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        let number = || value.replace('_', "").parse::<u64>().expect("a number");
        match pair[0].as_str() {
            "--mode" => args.mode = value.clone(),
            "--ids" => args.ids = number(),
            "--appends" => args.appends = number(),
            "--conversion-permille" => args.conversion_permille = number(),
            "--lookback-s" => args.lookback_s = number(),
            "--trim-every" => args.trim_every = number(),
            "--trim-budget" => args.trim_budget = number(),
            "--keys-max" => args.keys_max = number(),
            "--snapshot" => args.snapshot = Some(PathBuf::from(&value)),
            "--port" => args.port = number() as u16,
            "--seed" => args.seed = number(),
            "--clock" => args.cpu_clock = value == "cpu",
            "--timing" => args.timing = value.clone(),
            "--new-user-permille" => args.new_user_permille = number(),
            "--report-every" => args.report_every = number(),
            "--control-gib" => args.control_gib = number(),
            "--control-ops" => args.control_ops = number(),
            "--control-thp" => args.control_thp = value == "on",
            "--slow-log" => args.slow_log = Some(PathBuf::from(&value)),
            "--slow-us" => args.slow_us = number(),
            "--huge-pages" => cardinal_chains::set_huge_pages(value == "on"),
            other => panic!("unknown flag {other}"),
        }
    }
    if args.keys_max == 0 {
        args.keys_max = args.ids;
    }
    args
}

/// splitmix64 (Steele, Lea, Flood 2014): fast and good enough for a load
/// generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// Zipf ranks in `1..=n` by rejection-inversion (Hörmann and Derflinger,
/// "Rejection-inversion to generate variates from monotone discrete
/// distributions", 1996), as Apache Commons RNG samples them: O(1) per
/// draw with no table, so the id space can be billions.
struct Zipf {
    n: f64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    squeeze: f64,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Zipf {
        let mut z = Zipf {
            n: n as f64,
            s,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            squeeze: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n + 0.5);
        z.squeeze = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + rng.unit() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.squeeze || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// Rank to user id: an odd multiplier and an xor, a bijection on u64, so
/// neighbouring ranks land far apart ("a shuffled id space").
fn user_of(rank: u64) -> u64 {
    (rank.wrapping_mul(0xd6e8_feb8_6659_fd93)) ^ 0x5555_aaaa_0f0f_f0f0
}

fn record(rng: &mut Rng, now_ms: u64) -> Record {
    let r = rng.next();
    let kind = if r & 3 == 0 {
        Kind::CLICK
    } else {
        Kind::IMPRESSION
    };
    let mut record = Record::new(
        now_ms,
        kind,
        CampaignId((r >> 8) as u32 % 500),
        SiteId((r >> 20) as u32 % 5000),
    )
    .expect("time in range");
    if (r >> 40).is_multiple_of(8) {
        record.revenue_micros = ((r >> 44) % 1_000_000) as i64 + 1;
    }
    // Attribute lengths uniform in 0..=40: records of 16-64 bytes, 36 on
    // average.
    let attrs = [0x5a; 40];
    record
        .set_attrs(&attrs[..((r >> 50) % 41) as usize])
        .expect("fits");
    record
}

/// A log-linear latency histogram in nanoseconds: 64 sub-buckets per power
/// of two (1.6% resolution), the layout of HdrHistogram with 2 significant
/// digits.
struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
    over_100us: u64,
    over_1ms: u64,
}

const SUB: u64 = 64;

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: vec![0; 64 * SUB as usize],
            total: 0,
            max: 0,
            over_100us: 0,
            over_1ms: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let e = 63 - u64::from(v.leading_zeros());
        let shift = e - 6;
        ((shift + 1) * SUB + ((v >> shift) - SUB)) as usize
    }

    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < SUB {
            return i;
        }
        let shift = i / SUB - 1;
        ((i % SUB) + SUB) << shift
    }

    fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.total += 1;
        self.max = self.max.max(ns);
        self.over_100us += u64::from(ns > 100_000);
        self.over_1ms += u64::from(ns > 1_000_000);
    }

    fn quantile(&self, q: f64) -> u64 {
        let rank = ((self.total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i);
            }
        }
        self.max
    }
}

const CAUSES: [&str; 5] = ["append", "chain move", "shard growth", "trim slice", "emit"];

/// The operations of a per-operation run that took at least `--slow-us`,
/// numbered in the run's order (every timed operation counts, slow or
/// not), one line each: `op<TAB>cause<TAB>ns`.
struct SlowLog {
    out: Option<std::io::BufWriter<std::fs::File>>,
    threshold_ns: u64,
    op: u64,
}

impl SlowLog {
    fn new(args: &Args) -> SlowLog {
        let out = args.slow_log.as_ref().map(|path| {
            let mut out =
                std::io::BufWriter::new(std::fs::File::create(path).expect("create --slow-log"));
            writeln!(out, "op\tcause\tns").expect("write --slow-log");
            out
        });
        SlowLog {
            out,
            threshold_ns: args.slow_us * 1000,
            op: 0,
        }
    }

    fn note(&mut self, cause: &str, ns: u64) {
        self.op += 1;
        if ns >= self.threshold_ns
            && let Some(out) = &mut self.out
        {
            writeln!(out, "{}\t{cause}\t{ns}", self.op).expect("write --slow-log");
        }
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

/// The process's peak resident set (VmHWM), in bytes.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// A timestamp in nanoseconds for per-operation latency: the wall clock, or
/// with `--clock cpu` the thread's CPU clock.
struct OpClock {
    cpu: bool,
    origin: Instant,
}

impl OpClock {
    fn now(&self) -> u64 {
        if self.cpu {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec and the clock id is
            // a constant Linux supports; std has no thread CPU clock, and
            // reading /proc per operation costs microseconds.
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        } else {
            self.origin.elapsed().as_nanos() as u64
        }
    }
}

/// This thread's CPU time, from the scheduler's own nanosecond counter
/// (first field of /proc/thread-self/schedstat): no FFI needed.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(
        stat.split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    )
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

fn print_histograms(hists: &[Histogram], names: &[&str]) {
    println!(
        "\n| cause | count | p50 us | p90 us | p99 us | p99.9 us | p99.99 us | max us | > 100 us | > 1 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (h, name) in hists.iter().zip(names) {
        if h.total == 0 {
            continue;
        }
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            h.total,
            us(h.quantile(0.5)),
            us(h.quantile(0.9)),
            us(h.quantile(0.99)),
            us(h.quantile(0.999)),
            us(h.quantile(0.9999)),
            us(h.max),
            h.over_100us,
            h.over_1ms
        );
    }
}

struct Interval {
    started: Instant,
    cpu: Duration,
    max_ns: u64,
}

impl Interval {
    fn start() -> Interval {
        Interval {
            started: Instant::now(),
            cpu: thread_cpu(),
            max_ns: 0,
        }
    }
}

fn header() {
    println!(
        "appends_M\twall_Mops\tcpu_Mops\tlive_keys\trss_MiB\trss_B_per_key\tindex_B_per_key\toverhead_B_per_key\tmax_op_us"
    );
}

/// Where the users of the workload come from.
///
/// Without `--new-user-permille` (0): Zipf ranks over an id space of `--ids`
/// users, as the issue describes. That cannot reach 200M live keys in a
/// feasible run (about 30M distinct keys after 400M appends over 300M ids),
/// so with `--new-user-permille P` an operation is, with probability
/// P/1000, the first event of a brand-new user (a new cookie), and
/// otherwise an event of a user seen before, picked by Zipf (s = 1.1) over
/// recency: rank 1 is the newest user, rank n the oldest of the n seen so
/// far. The Zipf sampler is rebuilt over the users seen every 1M draws.
struct Users {
    zipf: Zipf,
    new_user_permille: u64,
    seen: u64,
    draws_since_rebuild: u64,
}

impl Users {
    fn new(args: &Args) -> Users {
        let n = if args.new_user_permille == 0 {
            args.ids
        } else {
            1
        };
        Users {
            zipf: Zipf::new(n, 1.1),
            new_user_permille: args.new_user_permille,
            seen: 0,
            draws_since_rebuild: 0,
        }
    }

    fn next(&mut self, rng: &mut Rng) -> UserId {
        if self.new_user_permille == 0 {
            return UserId(user_of(self.zipf.sample(rng)));
        }
        self.draws_since_rebuild += 1;
        if self.draws_since_rebuild == 1_000_000 {
            self.draws_since_rebuild = 0;
            self.zipf = Zipf::new(self.seen.max(1), 1.1);
        }
        if self.seen == 0 || rng.below(1000) < self.new_user_permille {
            self.seen += 1;
            return UserId(user_of(self.seen));
        }
        // The sampler's n is at most `seen`, so the rank names a seen user.
        let rank = self.zipf.sample(rng);
        UserId(user_of(self.seen + 1 - rank))
    }
}

/// One generated operation.
enum Op {
    Append(UserId, Record),
    Convert(UserId),
}

/// The driver of one chains run: the store, the generator and the counts.
struct ChainsRun<'a> {
    args: &'a Args,
    store: Store,
    users: Users,
    rng: Rng,
    chain: Vec<Record>,
    rows: Vec<attribution::Credit>,
    appends: u64,
    conversions: u64,
    credited: u64,
    next_trim: u64,
    /// Every trim slice's outcome, summed.
    trims: TrimOutcome,
    slices: u64,
}

impl ChainsRun<'_> {
    fn count_trim(&mut self, trim: &TrimOutcome) {
        self.slices += 1;
        self.trims.add(trim);
    }

    fn now_ms(&self) -> u64 {
        1_700_000_000_000 + self.appends * 1000 / APPENDS_PER_SECOND
    }

    /// The next operation; an append counts at generation, so its record's
    /// time follows the virtual clock.
    fn generate(&mut self) -> Op {
        let user = self.users.next(&mut self.rng);
        if self.rng.below(1000) < self.args.conversion_permille {
            return Op::Convert(user);
        }
        let now_ms = self.now_ms();
        let r = record(&mut self.rng, now_ms);
        self.appends += 1;
        Op::Append(user, r)
    }

    fn convert(&mut self, user: UserId, now_ms: u64) {
        self.chain.clear();
        self.rows.clear();
        if self.store.take(user, &mut self.chain).expect("routed") {
            let conversion = Conversion {
                user,
                time_ms: now_ms,
                revenue_micros: 1_000_000,
            };
            attribution::attribute(
                &conversion,
                &self.chain,
                self.args.lookback_s * 1000,
                Model::Linear,
                |r| r.kind == Kind::CLICK,
                &mut self.rows,
            );
            self.credited += self.rows.len() as u64;
        }
        self.conversions += 1;
    }

    /// Whether a trim slice is due after the appends generated so far.
    fn trim_due(&mut self) -> bool {
        if self.appends >= self.next_trim {
            self.next_trim += self.args.trim_every;
            true
        } else {
            false
        }
    }
}

/// Per-interval and whole-run counters of one chains run.
struct Report {
    every: u64,
    next: u64,
    interval: Interval,
    /// CPU nanoseconds of the generator in this interval (batch timing).
    generator_ns: u64,
    generator_ns_total: u64,
    /// Wall and CPU time of the reports' `Store::memory` calls (a walk of
    /// the arena, outside every interval), left out of the run's totals.
    memory_wall: Duration,
    memory_cpu: Duration,
    peak_index_b_per_key: f64,
}

impl Report {
    fn new(every: u64) -> Report {
        Report {
            every,
            next: every,
            interval: Interval::start(),
            generator_ns: 0,
            generator_ns_total: 0,
            memory_wall: Duration::ZERO,
            memory_cpu: Duration::ZERO,
            peak_index_b_per_key: 0.0,
        }
    }

    fn header(&self) {
        println!(
            "appends_M\twall_Mops\tcpu_Mops\tstore_cpu_Mops\tlive_keys\trss_MiB\trss_B_per_key\tindex_B_per_key\toverhead_B_per_key\tmax_op_us"
        );
    }

    /// Prints a line if `appends` passed the next report point.
    fn maybe_print(&mut self, appends: u64, store: &Store) {
        if appends < self.next {
            return;
        }
        let done = appends - (self.next - self.every);
        self.next += self.every;
        let wall = self.interval.started.elapsed().as_secs_f64();
        let cpu = (thread_cpu() - self.interval.cpu).as_secs_f64();
        let store_cpu = cpu - self.generator_ns as f64 / 1e9;
        let (memory_started, memory_cpu) = (Instant::now(), thread_cpu());
        let m = store.memory();
        self.memory_wall += memory_started.elapsed();
        self.memory_cpu += thread_cpu() - memory_cpu;
        let rss = rss_bytes();
        let keys = m.keys.max(1) as f64;
        let index = m.index_bytes as f64 / keys;
        if m.keys > 1_000_000 {
            self.peak_index_b_per_key = self.peak_index_b_per_key.max(index);
        }
        let store_mops = if self.generator_ns == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", done as f64 / store_cpu.max(1e-9) / 1e6)
        };
        println!(
            "{}\t{:.2}\t{:.2}\t{store_mops}\t{}\t{}\t{:.1}\t{index:.1}\t{:.1}\t{}",
            appends / 1_000_000,
            done as f64 / wall / 1e6,
            done as f64 / cpu.max(1e-9) / 1e6,
            m.keys,
            rss >> 20,
            rss as f64 / keys,
            (m.held_bytes() - m.record_bytes) as f64 / keys,
            us(self.interval.max_ns)
        );
        self.interval = Interval::start();
        self.generator_ns = 0;
    }
}

/// Page faults of this thread so far (minor and major), from
/// `getrusage(RUSAGE_THREAD)`: a batch that faulted had the kernel find
/// memory for it, whose time the thread CPU clock charges to the batch.
fn page_faults() -> u64 {
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_THREAD is a
    // constant Linux supports.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_THREAD) failed");
    (usage.ru_minflt + usage.ru_majflt) as u64
}

/// The thread's CPU clock in nanoseconds (`clock_gettime`, ~0.4 us).
fn cpu_now() -> u64 {
    OpClock {
        cpu: true,
        origin: Instant::now(),
    }
    .now()
}

fn run_chains(args: &Args) {
    let config = Config::for_keys(args.keys_max, 0, args.lookback_s * 1000);
    eprintln!("config: {config:?} timing {}", args.timing);
    let mut run = ChainsRun {
        args,
        store: Store::new(config).expect("valid config"),
        users: Users::new(args),
        rng: Rng(args.seed),
        chain: Vec::with_capacity(1024),
        rows: Vec::with_capacity(1024),
        appends: 0,
        conversions: 0,
        credited: 0,
        next_trim: args.trim_every,
        trims: TrimOutcome::default(),
        slices: 0,
    };
    let mut report = Report::new(args.report_every);
    let started = Instant::now();
    let cpu_started = thread_cpu();
    report.header();
    let (hists, names): (Vec<Histogram>, &[&str]) = match args.timing.as_str() {
        "op" => (run_per_op(&mut run, &mut report), &CAUSES),
        "batch" => (run_batched(&mut run, &mut report), &BATCH_CAUSES),
        other => panic!("unknown timing {other}"),
    };
    let wall = (started.elapsed() - report.memory_wall).as_secs_f64();
    let cpu = (thread_cpu() - cpu_started - report.memory_cpu).as_secs_f64();
    let store = run.store;
    let m = store.memory();
    let appends = run.appends;
    println!(
        "\nchains: {appends} appends, {} conversions ({} credit rows), {} users created, {:.2} M appends/s wall, {:.2} M appends/CPU-s",
        run.conversions,
        run.credited,
        run.users.seen,
        appends as f64 / wall / 1e6,
        appends as f64 / cpu / 1e6
    );
    if report.generator_ns_total > 0 {
        let generator = report.generator_ns_total as f64 / 1e9;
        println!(
            "generator {generator:.1} CPU-s ({:.0} ns per append); store alone {:.2} M appends/CPU-s",
            generator * 1e9 / appends as f64,
            appends as f64 / (cpu - generator) / 1e6
        );
    }
    let slices = run.slices.max(1) as f64;
    println!(
        "trim: {} slices; per slice {:.0} slots scanned, {:.1} chains read, {:.1} chains removed ({:.1} unread), {:.1} records dropped",
        run.slices,
        run.trims.slots_scanned as f64 / slices,
        run.trims.chains_read as f64 / slices,
        run.trims.chains_removed as f64 / slices,
        run.trims.chains_removed_unread as f64 / slices,
        run.trims.records_dropped as f64 / slices
    );
    println!("memory: {m:?}");
    let keys = m.keys.max(1) as f64;
    println!(
        "per key: index {:.1} B (peak past 1M keys {:.1}), arena slots {:.1} B, records {:.1} B (+ {:.1} B expired, not yet dropped), held {:.1} B, overhead (held - records) {:.1} B, RSS {:.1} B, peak RSS {} MiB",
        m.index_bytes as f64 / keys,
        report.peak_index_b_per_key,
        m.slot_bytes as f64 / keys,
        m.record_bytes as f64 / keys,
        m.expired_bytes as f64 / keys,
        m.held_bytes() as f64 / keys,
        (m.held_bytes() - m.record_bytes) as f64 / keys,
        rss_bytes() as f64 / keys,
        peak_rss_bytes() >> 20
    );
    print_histograms(&hists, names);
    if let Some(path) = &args.snapshot {
        let written = store.write_snapshot_file(path).expect("snapshot");
        drop(store);
        let (restored, read) = Store::read_snapshot_file(path).expect("restore");
        // The snapshot leaves out users whose records have all expired.
        assert_eq!(restored.keys(), written.keys);
        assert_eq!(restored.memory().record_bytes, m.record_bytes);
        println!(
            "\nsnapshot: {:.2} GB, {} keys; write {:.2} s = {:.2} GB/s; restore {:.2} s = {:.2} GB/s",
            written.bytes as f64 / 1e9,
            written.keys,
            written.elapsed.as_secs_f64(),
            written.gb_per_s(),
            read.elapsed.as_secs_f64(),
            read.gb_per_s()
        );
        std::fs::remove_file(path).expect("remove snapshot");
    }
}

/// One `append` per operation, each timed by `--clock` (wall or thread
/// CPU): the per-operation latency histograms.
fn run_per_op(run: &mut ChainsRun, report: &mut Report) -> Vec<Histogram> {
    let clock = OpClock {
        cpu: run.args.cpu_clock,
        origin: Instant::now(),
    };
    let mut hists: Vec<Histogram> = CAUSES.iter().map(|_| Histogram::new()).collect();
    let mut slow = SlowLog::new(run.args);
    while run.appends < run.args.appends {
        let now_ms = run.now_ms();
        match run.generate() {
            Op::Convert(user) => {
                let t = clock.now();
                run.convert(user, now_ms);
                let ns = clock.now() - t;
                hists[4].record(ns);
                slow.note(CAUSES[4], ns);
                report.interval.max_ns = report.interval.max_ns.max(ns);
            }
            Op::Append(user, r) => {
                let t = clock.now();
                let outcome = run.store.append(user, &r).expect("room");
                let ns = clock.now() - t;
                let cause = if outcome.shard_grew {
                    2
                } else if outcome.chain_moved {
                    1
                } else {
                    0
                };
                hists[cause].record(ns);
                slow.note(CAUSES[cause], ns);
                report.interval.max_ns = report.interval.max_ns.max(ns);
                if run.trim_due() {
                    let t = clock.now();
                    let trim = run.store.trim_slice(now_ms, run.args.trim_budget);
                    let ns = clock.now() - t;
                    run.count_trim(&trim);
                    hists[3].record(ns);
                    slow.note(CAUSES[3], ns);
                    report.interval.max_ns = report.interval.max_ns.max(ns);
                }
                report.maybe_print(run.appends, &run.store);
            }
        }
    }
    hists
}

/// Operations per timed batch in `--timing batch`.
const BATCH_OPS: usize = 64;

/// Causes of a batch, by what the slowest thing in it was.
const BATCH_CAUSES: [&str; 5] = [
    "batch: appends only",
    "batch with chain move",
    "batch with shard growth",
    "batch with trim slice",
    "batch with emit",
];

/// Batches of `BATCH_OPS` operations: generated (timed apart, by the
/// thread CPU clock), then applied with `append_batch` for each run of
/// appends, `take` + attribution for conversions and the trim slices due,
/// timed as one by the thread CPU clock. A batch's time bounds the time of
/// every operation in it, so the worst batch bounds the worst operation.
fn run_batched(run: &mut ChainsRun, report: &mut Report) -> Vec<Histogram> {
    let mut hists: Vec<Histogram> = BATCH_CAUSES.iter().map(|_| Histogram::new()).collect();
    let mut ops: Vec<(u64, Op)> = Vec::with_capacity(BATCH_OPS);
    let mut pending: Vec<(UserId, Record)> = Vec::with_capacity(BATCH_OPS);
    let mut outcomes = Vec::with_capacity(BATCH_OPS);
    let mut trims = Vec::with_capacity(BATCH_OPS);
    let mut faults = FaultSplit::new();
    let mut t0 = cpu_now();
    while run.appends < run.args.appends {
        ops.clear();
        trims.clear();
        while ops.len() < BATCH_OPS && run.appends < run.args.appends {
            let now_ms = run.now_ms();
            let op = run.generate();
            let trim = matches!(op, Op::Append(..)) && run.trim_due();
            ops.push((now_ms, op));
            trims.push(trim);
        }
        let faults_before = page_faults();
        let t1 = cpu_now();
        let (mut moved, mut grew, mut trimmed, mut emitted) = (false, false, false, false);
        pending.clear();
        for ((now_ms, op), &trim) in ops.drain(..).zip(&trims) {
            match op {
                Op::Append(user, r) => {
                    pending.push((user, r));
                    if trim {
                        flush(run, &mut pending, &mut outcomes, &mut moved, &mut grew);
                        let trim = run.store.trim_slice(now_ms, run.args.trim_budget);
                        run.count_trim(&trim);
                        trimmed = true;
                    }
                }
                Op::Convert(user) => {
                    flush(run, &mut pending, &mut outcomes, &mut moved, &mut grew);
                    run.convert(user, now_ms);
                    emitted = true;
                }
            }
        }
        flush(run, &mut pending, &mut outcomes, &mut moved, &mut grew);
        let t2 = cpu_now();
        let faulted = page_faults() != faults_before;
        let cause = if grew {
            2
        } else if trimmed {
            3
        } else if emitted {
            4
        } else if moved {
            1
        } else {
            0
        };
        let ns = t2 - t1;
        hists[cause].record(ns);
        faults.record(ns, faulted);
        report.interval.max_ns = report.interval.max_ns.max(ns);
        report.generator_ns += t1 - t0;
        report.generator_ns_total += t1 - t0;
        report.maybe_print(run.appends, &run.store);
        t0 = t2;
    }
    faults.print(hists.iter().map(|h| h.total).sum());
    hists
}

/// Timed batches split by whether the thread took a page fault during
/// them: a fault's time is the kernel finding memory, not the batch's
/// work, so the batches without one are the ones that bound the work.
struct FaultSplit {
    unfaulted: Histogram,
    faulted_over_1ms: u64,
}

impl FaultSplit {
    fn new() -> FaultSplit {
        FaultSplit {
            unfaulted: Histogram::new(),
            faulted_over_1ms: 0,
        }
    }

    fn record(&mut self, ns: u64, faulted: bool) {
        if faulted {
            self.faulted_over_1ms += u64::from(ns > 1_000_000);
        } else {
            self.unfaulted.record(ns);
        }
    }

    fn print(&self, batches: u64) {
        println!(
            "\nbatches without a page fault: {} of {batches}, max {} us, {} over 1 ms; batches with page faults over 1 ms: {}",
            self.unfaulted.total,
            us(self.unfaulted.max),
            self.unfaulted.over_1ms,
            self.faulted_over_1ms
        );
    }
}

fn flush(
    run: &mut ChainsRun,
    pending: &mut Vec<(UserId, Record)>,
    outcomes: &mut Vec<AppendOutcome>,
    moved: &mut bool,
    grew: &mut bool,
) {
    if pending.is_empty() {
        return;
    }
    outcomes.clear();
    run.store.append_batch(pending, outcomes).expect("room");
    for outcome in outcomes.iter() {
        *moved |= outcome.chain_moved;
        *grew |= outcome.shard_grew;
    }
    pending.clear();
}

/// Memory given back: `--ids` users arrive at once with 4 records of 28
/// bytes each (chains move through four size classes), then all convert.
/// Prints the store's counts and the process's RSS after each step.
fn run_burst(args: &Args) {
    let config = Config {
        shard_bits: 6,
        group_bits: 0,
        lookback_ms: 3_600_000,
        shard_slots_initial: 16,
    };
    let mut store = Store::new(config).expect("valid");
    let show = |what: &str, store: &Store| {
        let m = store.memory();
        println!(
            "{what}: keys {}, arena {:.1} MB, arena mapped {:.1} MB, heap {:.1} MB, chunks faulted in ahead {:.1} MB, RSS {} MiB",
            m.keys,
            m.arena_bytes as f64 / 1e6,
            m.arena_mapped_bytes as f64 / 1e6,
            m.heap_bytes as f64 / 1e6,
            cardinal_chains::arena_ready_bytes() as f64 / 1e6,
            rss_bytes() >> 20
        );
    };
    show("empty", &store);
    for n in 0..4u64 {
        for user in 0..args.ids {
            let mut r = Record::new(1_000 + n, Kind::CLICK, CampaignId(1), SiteId(2))
                .expect("time in range");
            r.set_attrs(&[0x5a; 12]).expect("fits");
            store.append(UserId(user), &r).expect("room");
        }
    }
    show("after the burst", &store);
    let mut out = Vec::new();
    for user in 0..args.ids {
        out.clear();
        store.take(UserId(user), &mut out).expect("own group");
    }
    show("after every user converted", &store);
}

/// The noise floor of the batch timing: no store, a fixed amount of work
/// per batch (`--control-ops` read-modify-writes of random words of a
/// buffer of `--control-gib` GiB, resident before the clock starts, like
/// the store's heap), `--appends / 64` batches timed exactly as
/// `run_batched` times the store's batches of 64 operations. Every batch does the same work, so its tail (how many pass
/// 1 ms) is what the machine adds: preemption charged to the thread CPU
/// clock by the hypervisor, interrupts, the kernel's own work.
fn run_control(args: &Args) {
    let words = (args.control_gib << 30) / 8;
    let mut buffer = vec![0u64; words as usize];
    if args.control_thp {
        let start = buffer.as_mut_ptr() as usize;
        let aligned = start.next_multiple_of(2 << 20);
        let len = (start + buffer.len() * 8 - aligned) / (2 << 20) * (2 << 20);
        // SAFETY: a range inside the buffer's own allocation; the advice
        // changes how the kernel backs it, not its contents.
        let rc = unsafe { libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        assert_eq!(rc, 0, "madvise(MADV_HUGEPAGE)");
    }
    // Fault every page in before timing, as the store's heap is at steady
    // state.
    for page in buffer.chunks_mut(512) {
        page[0] = 1;
    }
    let mut rng = Rng(args.seed);
    let mut hist = Histogram::new();
    let mut split = FaultSplit::new();
    let batches = args.appends / BATCH_OPS as u64;
    let started = Instant::now();
    let cpu_started = cpu_now();
    let mut sum = 0u64;
    for _ in 0..batches {
        let faults = page_faults();
        let t1 = cpu_now();
        for _ in 0..args.control_ops {
            let i = (rng.next() % words) as usize;
            buffer[i] = buffer[i].wrapping_add(1);
            sum = sum.wrapping_add(buffer[i]);
        }
        let t2 = cpu_now();
        let ns = t2 - t1;
        hist.record(ns);
        split.record(ns, page_faults() != faults);
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = (cpu_now() - cpu_started) as f64 / 1e9;
    println!(
        "control: {batches} batches of {} random read-modify-writes over {} GiB (huge pages advised: {}) in {wall:.1} s wall, {cpu:.1} s thread CPU (checksum {sum})",
        args.control_ops, args.control_gib, args.control_thp
    );
    split.print(hist.total);
    print_histograms(&[hist], &["batch of fixed work"]);
}

/// The index alone ([`KeyIndex`], no chains): `--keys-max` distinct keys
/// inserted once each. Every insert is timed by the wall clock (the
/// histogram) and every 64 inserts by the thread CPU clock: the worst
/// 64-insert batch bounds the worst single insert's CPU time.
fn run_index(args: &Args) {
    let config = Config::for_keys(args.keys_max, 0, 0);
    eprintln!("index: {} shards", 1u64 << config.shard_bits);
    let mut index = KeyIndex::new(config.shard_bits, config.shard_slots_initial).expect("valid");
    let names = [
        "insert",
        "insert with shard growth",
        "64 inserts (CPU clock)",
    ];
    let mut hists: Vec<Histogram> = names.iter().map(|_| Histogram::new()).collect();
    let clock = OpClock {
        cpu: args.cpu_clock,
        origin: Instant::now(),
    };
    let mut slow = SlowLog::new(args);
    let started = Instant::now();
    let cpu_started = thread_cpu();
    let mut interval = Interval::start();
    let mut peak_b_per_key: f64 = 0.0;
    let mut batch_faults = page_faults();
    let mut unfaulted_max = 0;
    let mut batch_cpu = cpu_now();
    println!(
        "keys_M\twall_Mops\tcpu_Mops\tkeys\trss_MiB\trss_B_per_key\tindex_B_per_key\tmax_op_us"
    );
    for i in 1..=args.keys_max {
        let t = clock.now();
        let outcome = index
            .insert(user_of(i), (i % u64::from(u32::MAX)) as u32)
            .expect("room");
        let ns = clock.now() - t;
        assert!(outcome.new_key);
        hists[usize::from(outcome.shard_grew)].record(ns);
        slow.note(names[usize::from(outcome.shard_grew)], ns);
        interval.max_ns = interval.max_ns.max(ns);
        if i.is_multiple_of(64) {
            let now = cpu_now();
            hists[2].record(now - batch_cpu);
            let faults = page_faults();
            if faults == batch_faults {
                unfaulted_max = unfaulted_max.max(now - batch_cpu);
            }
            batch_faults = faults;
            batch_cpu = cpu_now();
        }
        if i.is_multiple_of(args.report_every) {
            let wall = interval.started.elapsed().as_secs_f64();
            let cpu = (thread_cpu() - interval.cpu).as_secs_f64();
            let rss = rss_bytes();
            let keys = index.len() as f64;
            let b_per_key = index.heap_bytes() as f64 / keys;
            if index.len() >= 1_000_000 {
                peak_b_per_key = peak_b_per_key.max(b_per_key);
            }
            println!(
                "{}\t{:.2}\t{:.2}\t{}\t{}\t{:.1}\t{b_per_key:.1}\t{}",
                i / 1_000_000,
                args.report_every as f64 / wall / 1e6,
                args.report_every as f64 / cpu.max(1e-9) / 1e6,
                index.len(),
                rss >> 20,
                rss as f64 / keys,
                us(interval.max_ns)
            );
            interval = Interval::start();
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = (thread_cpu() - cpu_started).as_secs_f64();
    // Spot check: a million keys present, a million absent.
    let mut rng = Rng(args.seed);
    for _ in 0..1_000_000 {
        let i = 1 + rng.below(args.keys_max);
        assert_eq!(
            index.get(user_of(i)),
            Some((i % u64::from(u32::MAX)) as u32)
        );
        assert_eq!(
            index.get(user_of(args.keys_max + 1 + rng.below(1 << 40))),
            None
        );
    }
    let keys = index.len() as f64;
    println!(
        "\nindex: {} keys, {:.2} M inserts/s wall, {:.2} M inserts/CPU-s; {:.1} B/key at the end, peak {:.1} B/key past 1M keys; RSS {} MiB = {:.1} B/key, peak RSS {} MiB",
        index.len(),
        keys / wall / 1e6,
        keys / cpu / 1e6,
        index.heap_bytes() as f64 / keys,
        peak_b_per_key,
        rss_bytes() >> 20,
        rss_bytes() as f64 / keys,
        peak_rss_bytes() >> 20
    );
    println!(
        "worst 64 inserts without a page fault: {} us (CPU clock)",
        us(unfaulted_max)
    );
    print_histograms(&hists, &names);
}

fn run_hashbrown(args: &Args) {
    let mut map: hashbrown::HashMap<u64, Vec<u8>> = hashbrown::HashMap::new();
    let clock = OpClock {
        cpu: args.cpu_clock,
        origin: Instant::now(),
    };
    let zipf = Zipf::new(args.ids, 1.1);
    let mut rng = Rng(args.seed);
    let names = ["insert/append", "remove (emit)"];
    let mut hists: Vec<Histogram> = names.iter().map(|_| Histogram::new()).collect();
    let mut appends = 0u64;
    let started = Instant::now();
    let cpu_started = thread_cpu();
    let mut interval = Interval::start();
    let base_rss = rss_bytes();
    let mut buf = [0u8; 64];
    header();
    while appends < args.appends {
        let now_ms = 1_700_000_000_000 + appends * 1000 / APPENDS_PER_SECOND;
        let user = user_of(zipf.sample(&mut rng));
        if rng.below(1000) < args.conversion_permille {
            let t = clock.now();
            drop(map.remove(&user));
            let ns = clock.now() - t;
            hists[1].record(ns);
            interval.max_ns = interval.max_ns.max(ns);
            continue;
        }
        let r = record(&mut rng, now_ms);
        let n = r.encode_into(&mut buf);
        let t = clock.now();
        map.entry(user).or_default().extend_from_slice(&buf[..n]);
        let ns = clock.now() - t;
        hists[0].record(ns);
        interval.max_ns = interval.max_ns.max(ns);
        appends += 1;
        if appends.is_multiple_of(REPORT_EVERY) {
            let wall = interval.started.elapsed().as_secs_f64();
            let cpu = (thread_cpu() - interval.cpu).as_secs_f64();
            let rss = rss_bytes() - base_rss;
            let keys = map.len().max(1) as f64;
            let index = (map.capacity() * 32) as f64 / keys;
            println!(
                "{}\t{:.2}\t{:.2}\t{}\t{}\t{:.1}\t{:.1}\t\t{}",
                appends / REPORT_EVERY,
                REPORT_EVERY as f64 / wall / 1e6,
                REPORT_EVERY as f64 / cpu.max(1e-9) / 1e6,
                map.len(),
                rss >> 20,
                rss as f64 / keys,
                index,
                us(interval.max_ns)
            );
            interval = Interval::start();
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = (thread_cpu() - cpu_started).as_secs_f64();
    println!(
        "\nhashbrown: {appends} appends, {} keys, {:.2} M appends/s wall, {:.2} M appends/CPU-s, RSS {:.1} B/key",
        map.len(),
        appends as f64 / wall / 1e6,
        appends as f64 / cpu / 1e6,
        (rss_bytes() - base_rss) as f64 / map.len().max(1) as f64
    );
    print_histograms(&hists, &names);
}

/// Redis APPEND with pipelining: batches of `PIPELINE` commands written in
/// one go, then their replies read. Conversions are GETDEL. Latency is per
/// batch (the client cannot see a single command inside a pipeline).
fn run_redis(args: &Args) {
    const PIPELINE: u64 = 1000;
    let mut stream = TcpStream::connect(("127.0.0.1", args.port)).expect("redis is listening");
    stream.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::with_capacity(1 << 20, stream.try_clone().expect("clone"));
    let zipf = Zipf::new(args.ids, 1.1);
    let mut rng = Rng(args.seed);
    let mut hist = Histogram::new();
    let mut out = Vec::with_capacity(1 << 20);
    let mut buf = [0u8; 64];
    let (mut appends, mut commands) = (0u64, 0u64);
    let started = Instant::now();
    let mut interval = Interval::start();
    let clock = OpClock {
        cpu: false,
        origin: Instant::now(),
    };
    let base_used = redis_used_memory(&mut stream, &mut reader);
    let mut next_report = REPORT_EVERY;
    header();
    while appends < args.appends {
        out.clear();
        let mut batch = 0;
        while batch < PIPELINE {
            let now_ms = 1_700_000_000_000 + appends * 1000 / APPENDS_PER_SECOND;
            let key = user_of(zipf.sample(&mut rng)).to_le_bytes();
            if rng.below(1000) < args.conversion_permille {
                write!(out, "*2\r\n$6\r\nGETDEL\r\n$8\r\n").expect("vec");
                out.extend_from_slice(&key);
                out.extend_from_slice(b"\r\n");
            } else {
                let n = record(&mut rng, now_ms).encode_into(&mut buf);
                write!(out, "*3\r\n$6\r\nAPPEND\r\n$8\r\n").expect("vec");
                out.extend_from_slice(&key);
                write!(out, "\r\n${n}\r\n").expect("vec");
                out.extend_from_slice(&buf[..n]);
                out.extend_from_slice(b"\r\n");
                appends += 1;
            }
            batch += 1;
        }
        let t = clock.now();
        stream.write_all(&out).expect("send");
        for _ in 0..batch {
            read_reply(&mut reader);
        }
        let ns = clock.now() - t;
        hist.record(ns);
        interval.max_ns = interval.max_ns.max(ns);
        commands += batch;
        if appends >= next_report || appends >= args.appends {
            next_report += REPORT_EVERY;
            let wall = interval.started.elapsed().as_secs_f64();
            let used = redis_used_memory(&mut stream, &mut reader) - base_used;
            let keys = redis_dbsize(&mut stream, &mut reader).max(1);
            println!(
                "{}\t{:.2}\t\t{}\t{}\t{:.1}\t\t\t{}",
                appends / REPORT_EVERY,
                REPORT_EVERY as f64 / wall / 1e6,
                keys,
                used >> 20,
                used as f64 / keys as f64,
                us(interval.max_ns)
            );
            interval = Interval::start();
        }
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "\nredis: {appends} appends ({commands} commands), {:.2} M appends/s wall (client and server share the 2 cores)",
        appends as f64 / wall / 1e6
    );
    print_histograms(&[hist], &["pipeline of 1000"]);
}

fn read_reply(reader: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line).expect("reply");
    match line[0] {
        b'$' => {
            let len: i64 = std::str::from_utf8(&line[1..line.len() - 2])
                .expect("utf8")
                .parse()
                .expect("length");
            if len < 0 {
                return Vec::new();
            }
            let mut body = vec![0u8; len as usize + 2];
            reader.read_exact(&mut body).expect("bulk");
            body.truncate(len as usize);
            body
        }
        b'-' => panic!("redis error: {}", String::from_utf8_lossy(&line)),
        _ => line,
    }
}

fn redis_used_memory(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>) -> u64 {
    stream
        .write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n")
        .expect("send");
    let info = String::from_utf8(read_reply(reader)).expect("utf8");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

fn redis_dbsize(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>) -> u64 {
    stream.write_all(b"*1\r\n$6\r\nDBSIZE\r\n").expect("send");
    let line = read_reply(reader);
    std::str::from_utf8(&line[1..line.len() - 2])
        .expect("utf8")
        .parse()
        .expect("integer")
}

fn main() {
    let args = parse_args();
    eprintln!(
        "mode {} ids {} appends {} conversions {}/1000 lookback {} s (virtual) trim {} slots every {} appends",
        args.mode,
        args.ids,
        args.appends,
        args.conversion_permille,
        args.lookback_s,
        args.trim_budget,
        args.trim_every
    );
    match args.mode.as_str() {
        "chains" => run_chains(&args),
        "index" => run_index(&args),
        "hashbrown" => run_hashbrown(&args),
        "redis" => run_redis(&args),
        "control" => run_control(&args),
        "burst" => run_burst(&args),
        other => panic!("unknown mode {other}"),
    }
}
