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
use cardinal_chains::{CampaignId, Config, Kind, Record, SiteId, Store, UserId};

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

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
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

fn run_chains(args: &Args) {
    let config = Config::for_keys(args.keys_max, 0, args.lookback_s * 1000);
    eprintln!("config: {config:?}");
    let mut store = Store::new(config).expect("valid config");
    let clock = OpClock {
        cpu: args.cpu_clock,
        origin: Instant::now(),
    };
    let zipf = Zipf::new(args.ids, 1.1);
    let mut rng = Rng(args.seed);
    let mut hists: Vec<Histogram> = CAUSES.iter().map(|_| Histogram::new()).collect();
    let mut chain = Vec::with_capacity(1024);
    let mut rows = Vec::with_capacity(1024);
    let (mut appends, mut conversions, mut credited) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let cpu_started = thread_cpu();
    let mut interval = Interval::start();
    header();
    while appends < args.appends {
        let now_ms = 1_700_000_000_000 + appends * 1000 / APPENDS_PER_SECOND;
        let user = UserId(user_of(zipf.sample(&mut rng)));
        if rng.below(1000) < args.conversion_permille {
            let t = clock.now();
            chain.clear();
            rows.clear();
            if store.take(user, &mut chain).expect("routed") {
                let conversion = Conversion {
                    user,
                    time_ms: now_ms,
                    revenue_micros: 1_000_000,
                };
                let lookback = args.lookback_s * 1000;
                attribution::attribute(
                    &conversion,
                    &chain,
                    lookback,
                    Model::Linear,
                    |r| r.kind == Kind::CLICK,
                    &mut rows,
                );
                credited += rows.len() as u64;
            }
            let ns = clock.now() - t;
            hists[4].record(ns);
            interval.max_ns = interval.max_ns.max(ns);
            conversions += 1;
            continue;
        }
        let r = record(&mut rng, now_ms);
        let t = clock.now();
        let outcome = store.append(user, &r).expect("room");
        let ns = clock.now() - t;
        let cause = if outcome.shard_grew {
            2
        } else if outcome.chain_moved {
            1
        } else {
            0
        };
        hists[cause].record(ns);
        interval.max_ns = interval.max_ns.max(ns);
        appends += 1;
        if appends.is_multiple_of(args.trim_every) {
            let t = clock.now();
            store.trim_slice(now_ms, args.trim_budget);
            let ns = clock.now() - t;
            hists[3].record(ns);
            interval.max_ns = interval.max_ns.max(ns);
        }
        if appends.is_multiple_of(REPORT_EVERY) {
            let wall = interval.started.elapsed().as_secs_f64();
            let cpu = (thread_cpu() - interval.cpu).as_secs_f64();
            let m = store.memory();
            let rss = rss_bytes();
            let keys = m.keys.max(1) as f64;
            println!(
                "{}\t{:.2}\t{:.2}\t{}\t{}\t{:.1}\t{:.1}\t{:.1}\t{}",
                appends / REPORT_EVERY,
                REPORT_EVERY as f64 / wall / 1e6,
                REPORT_EVERY as f64 / cpu.max(1e-9) / 1e6,
                m.keys,
                rss >> 20,
                rss as f64 / keys,
                m.index_bytes as f64 / keys,
                (m.heap_bytes - m.record_bytes) as f64 / keys,
                us(interval.max_ns)
            );
            interval = Interval::start();
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = (thread_cpu() - cpu_started).as_secs_f64();
    let m = store.memory();
    println!(
        "\nchains: {appends} appends, {conversions} conversions ({credited} credit rows), {:.2} M appends/s wall, {:.2} M appends/CPU-s",
        appends as f64 / wall / 1e6,
        appends as f64 / cpu / 1e6
    );
    println!("memory: {m:?}");
    let keys = m.keys.max(1) as f64;
    println!(
        "per key: index {:.1} B, arena slots {:.1} B, records {:.1} B, heap {:.1} B, overhead (heap - records) {:.1} B, RSS {:.1} B",
        m.index_bytes as f64 / keys,
        m.slot_bytes as f64 / keys,
        m.record_bytes as f64 / keys,
        m.heap_bytes as f64 / keys,
        (m.heap_bytes - m.record_bytes) as f64 / keys,
        rss_bytes() as f64 / keys
    );
    print_histograms(&hists, &CAUSES);
    if let Some(path) = &args.snapshot {
        let written = store.write_snapshot_file(path).expect("snapshot");
        let keys = store.keys();
        drop(store);
        let (restored, read) = Store::read_snapshot_file(path).expect("restore");
        assert_eq!(restored.keys(), keys);
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
        "hashbrown" => run_hashbrown(&args),
        "redis" => run_redis(&args),
        other => panic!("unknown mode {other}"),
    }
}
