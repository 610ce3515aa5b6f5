//! `cardinal demo serve`: the durable service end to end, on loopback.
//!
//! ```text
//!  cardinal-gen ──► DIR/impressions.csv + exact truth
//!  cardinal serve DIR/schema.sql        (a child process, DIR/data)
//!  cardinal send DIR/impressions.csv    (a child process, --ledger)
//!     ... half the batches acknowledged: SIGKILL the server, start it again
//!     send reconnects and resends what was not acknowledged
//!  GET /v1/summaries/reach  ──► beside the truth: exact counts equal,
//!     unique users inside their intervals; the ledger adds up to the file
//!  SIGTERM: the server snapshots and exits 0
//! ```
//!
//! Every process is this binary, so the tour shows what a user would run
//! by hand, and nothing here reaches into the server's state.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use cardinal_gen::impressions::{Format, Impressions, ImpressionsConfig, STATES, Truth};

use super::answers::thousands;

/// Batch size the tour's client sends: small enough that the kill lands
/// among hundreds of batches.
const BATCH_KIB: &str = "64";
/// How long the tour waits for the server to print its addresses.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the whole send may take before the tour gives up.
const SEND_TIMEOUT: Duration = Duration::from_secs(600);

/// The tour's flags.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  cardinal demo serve                          1M events; a few seconds
  cardinal demo serve --events 5000000 --out tour/   keep the data, log and ledger in ./tour

Afterwards `cardinal serve tour/schema.sql --data tour/data` serves the same state again.")]
pub struct Args {
    /// Rows to generate.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(10_000..))]
    events: u64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Directory for the schema, events, data and logs (default: a fresh
    /// `cardinal-demo-*` directory under the system temp dir).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

struct Server {
    child: Child,
}

/// A tour that fails midway does not leave its server running.
impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn start(dir: &Path, listen: &str, http: &str) -> Result<Server> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("serve.log"))
        .context("opening serve.log")?;
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "serve",
            "schema.sql",
            "--data",
            "data",
            "--listen",
            listen,
            "--http",
            http,
        ])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("starting cardinal serve")?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let (line_to, line) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stdout).read_line(&mut text);
        let _ = line_to.send(text);
    });
    match line.recv_timeout(START_TIMEOUT) {
        Ok(text) if text.contains("native protocol on") => Ok(Server { child }),
        _ => {
            let _ = child.kill();
            let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
            bail!("cardinal serve did not start; its log:\n{log}")
        }
    }
}

/// The last line of serve.log that starts with `prefix`.
fn logged(dir: &Path, prefix: &str) -> String {
    std::fs::read_to_string(dir.join("serve.log"))
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|l| l.starts_with(prefix))
        .unwrap_or("")
        .to_owned()
}

/// The ledger's lines: id, accepted, rejected, duplicate.
fn ledger(path: &Path) -> Vec<(u64, u64, u64, bool)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                matches!(*f.get(3)?, "true" | "1" | "duplicate"),
            ))
        })
        .collect()
}

pub fn run(args: &Args, schema: &str) -> Result<()> {
    let dir = match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.clone()
        }
        None => super::fresh_temp_dir()?,
    };
    std::fs::write(dir.join("schema.sql"), schema).context("writing schema.sql")?;
    let events_path = dir.join("impressions.csv");
    let users = (args.events / 10).max(1);
    println!(
        "cardinal demo serve: {} ad events through `cardinal send` into `cardinal serve`, \
         the server killed with SIGKILL midway, in {}\n",
        thousands(args.events),
        dir.display()
    );
    let generator = Impressions::new(ImpressionsConfig {
        events: args.events,
        users,
        days: 30,
        seed: args.seed,
        format: Format::Csv,
        start: ImpressionsConfig::default().start,
    })?;
    let file = std::fs::File::create(&events_path).context("creating impressions.csv")?;
    let (written, truth) = generator.write_with_truth(file)?;
    let lines = written.rows;

    let (listen, http) = (
        format!("127.0.0.1:{}", free_port()?),
        format!("127.0.0.1:{}", free_port()?),
    );
    let mut server = start(&dir, &listen, &http)?;
    println!("1. cardinal serve schema.sql --listen {listen} --http {http} --data data");
    let expected_batches = (written.bytes / (64 << 10)).max(2);
    // A ledger left by an earlier tour in the same directory would make
    // this send resume that one: each tour is a new send.
    let _ = std::fs::remove_file(dir.join("ledger.txt"));
    let started = Instant::now();
    let mut send = Command::new(std::env::current_exe()?)
        .args([
            "send",
            "impressions.csv",
            "--to",
            &listen,
            "--stream",
            "impressions",
        ])
        .args([
            "--batch-kib",
            BATCH_KIB,
            "--ledger",
            "ledger.txt",
            "--quiet",
        ])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting cardinal send")?;
    println!(
        "2. cardinal send impressions.csv --to {listen} --stream impressions --batch-kib {BATCH_KIB} --ledger ledger.txt"
    );
    // Half the batches acknowledged: SIGKILL, no goodbye.
    let ledger_path = dir.join("ledger.txt");
    loop {
        let acked = ledger(&ledger_path).len() as u64;
        if acked >= expected_batches / 2 {
            server.child.kill().context("SIGKILL")?;
            server.child.wait()?;
            println!(
                "3. SIGKILL the server after {} of about {} batches were acknowledged",
                thousands(acked),
                thousands(expected_batches)
            );
            break;
        }
        if send.try_wait()?.is_some() {
            println!("3. (the send finished before the kill: try more --events)");
            break;
        }
        ensure!(
            started.elapsed() < SEND_TIMEOUT,
            "the send made no progress"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(300));
    server = start(&dir, &listen, &http)?;
    println!(
        "4. start it again: {}",
        logged(&dir, "cardinal serve: recovered").trim_start_matches("cardinal serve: ")
    );
    let out = send.wait_with_output()?;
    let send_secs = started.elapsed().as_secs_f64();
    ensure!(
        out.status.success(),
        "cardinal send failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entries = ledger(&ledger_path);
    let mut by_id: BTreeMap<u64, u32> = BTreeMap::new();
    let (mut accepted, mut rejected, mut duplicates) = (0u64, 0u64, 0u64);
    for &(id, a, r, duplicate) in &entries {
        *by_id.entry(id).or_default() += 1;
        if duplicate {
            duplicates += 1;
        } else {
            accepted += a;
            rejected += r;
        }
    }
    println!(
        "5. the send reconnected, resent what was not acknowledged and ended with exit status 0 \
         ({:.1} s in all)\n",
        send_secs
    );

    let reach = fetch(
        &http,
        "/v1/summaries/reach?by=state&buckets=all&format=json",
    )?;
    let daily = fetch(&http, "/v1/summaries/reach?format=json")?;
    print_answers(
        &truth, &reach, &daily, lines, accepted, rejected, &by_id, duplicates,
    )?;

    let pid = server.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status()?;
    let status = server.child.wait()?;
    ensure!(status.success(), "the server's SIGTERM exit: {status}");
    println!(
        "\nSIGTERM: {}",
        logged(&dir, "cardinal serve: stopped").trim_start_matches("cardinal serve: ")
    );
    std::fs::remove_file(&events_path).ok();
    println!(
        "The server's log is {}; `cardinal serve {} --data {}` serves the state again.",
        dir.join("serve.log").display(),
        dir.join("schema.sql").display(),
        dir.join("data").display()
    );
    Ok(())
}

fn fetch(http: &str, path: &str) -> Result<Vec<serde_json::Value>> {
    let (status, body) = crate::serve::get(
        &format!("http://{http}"),
        path,
        None,
        crate::serve::QUERY_TIMEOUT_DEFAULT,
    )?;
    ensure!(
        status == 200,
        "GET {path}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    String::from_utf8(body)?
        .lines()
        .map(|l| serde_json::from_str(l).context("a JSON line"))
        .collect()
}

fn number(row: &serde_json::Value, key: &str) -> f64 {
    match &row[key] {
        serde_json::Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        serde_json::Value::Object(o) => o.get("value").and_then(|v| v.as_f64()).unwrap_or(f64::NAN),
        _ => f64::NAN,
    }
}

/// An exact count from a JSON row.
fn count(row: &serde_json::Value, key: &str) -> u64 {
    row[key].as_u64().unwrap_or(0)
}

/// An estimate's bound, rounded for printing.
#[allow(
    clippy::cast_possible_truncation,
    reason = "estimates of distinct users, far below 2^53"
)]
fn whole(x: f64) -> u64 {
    x.round().max(0.0) as u64
}

#[allow(clippy::too_many_arguments)]
fn print_answers(
    truth: &Truth,
    reach: &[serde_json::Value],
    daily: &[serde_json::Value],
    lines: u64,
    accepted: u64,
    rejected: u64,
    by_id: &BTreeMap<u64, u32>,
    duplicates: u64,
) -> Result<()> {
    let highest = by_id.keys().last().copied().unwrap_or(0);
    println!("NOTHING LOST, NOTHING DOUBLED");
    println!(
        "  batches acknowledged: ids 1..={} each at least once ({}), {} acknowledged again as \
         duplicates after the kill",
        thousands(highest),
        if by_id.len() as u64 == highest {
            "no gap"
        } else {
            "GAP"
        },
        thousands(duplicates)
    );
    println!(
        "  records the acknowledgements counted: {} accepted + {} rejected = {} of the file's {}",
        thousands(accepted),
        thousands(rejected),
        thousands(accepted + rejected),
        thousands(lines)
    );
    if accepted + rejected < lines && duplicates > 0 {
        println!(
            "    the other {} are in batches the server had made durable when it was killed, \
             before their acks went out: resent, they were acknowledged as duplicates and not \
             counted again",
            thousands(lines - accepted - rejected)
        );
    }
    let impressions: u64 = reach.iter().map(|r| count(r, "impressions")).sum();
    println!(
        "  impressions counted by the server: {} (the truth: {}) {}",
        thousands(impressions),
        thousands(truth.events_by_kind[0]),
        if impressions == truth.events_by_kind[0] {
            "exact"
        } else {
            "WRONG"
        }
    );
    let revenue: f64 = reach.iter().map(|r| number(r, "revenue")).sum();
    println!(
        "  impression revenue: ${revenue:.2} (the truth: ${:.2})",
        truth.revenue_micros_by_kind[0] as f64 / 1e6
    );
    // Unique users per (day, state), each against its truth.
    let start = truth.start;
    let (mut inside, mut groups) = (0, 0);
    for row in daily {
        let (Some(day), Some(state)) = (row["day"].as_str(), row["state"].as_str()) else {
            continue;
        };
        let Some(index) = STATES.iter().position(|&(name, _)| name == state) else {
            continue;
        };
        let ymd: Vec<u32> = day
            .get(..10)
            .unwrap_or("")
            .split('-')
            .filter_map(|p| p.parse().ok())
            .collect();
        let [y, m, d] = ymd[..] else {
            bail!("a day {day:?} is not YYYY-MM-DD...");
        };
        let date = cardinal_gen::text::Date::new(i64::from(y), m, d);
        let d = usize::try_from(date.0 - start.0).context("a day before the start")?;
        let true_users = truth.by_state_by_day[d][index] as f64;
        let users = &row["users"];
        let (lower, upper) = (number(users, "lower"), number(users, "upper"));
        groups += 1;
        if (lower..=upper).contains(&true_users) {
            inside += 1;
        }
    }
    println!(
        "  unique users of {groups} (day, state) groups: the truth inside the 95% interval in \
         {inside} ({:.1}%)\n",
        100.0 * f64::from(inside) / f64::from(groups.max(1))
    );
    println!("REACH over all days (GET /v1/summaries/reach?by=state&buckets=all), three states:");
    println!(
        "  {:<5}  {:>11}  {:>26}",
        "state", "impressions", "users (95% interval)"
    );
    for state in ["CA", "KY", "WY"] {
        if let Some(row) = reach.iter().find(|r| r["state"] == state) {
            let users = &row["users"];
            println!(
                "  {:<5}  {:>11}  {:>26}",
                state,
                thousands(count(row, "impressions")),
                format!(
                    "{} [{}, {}]",
                    thousands(whole(number(users, "value"))),
                    thousands(whole(number(users, "lower"))),
                    thousands(whole(number(users, "upper")))
                )
            );
        }
    }
    Ok(())
}
