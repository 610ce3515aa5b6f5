//! A real rsyslog for the end-to-end tests: started in the foreground on
//! a configuration the test writes (its own work directory and pid file;
//! the system's syslog untouched), killed when dropped.
//!
//! Where it comes from: `CARDINAL_RSYSLOGD`, else `/usr/sbin/rsyslogd`
//! (Debian's `rsyslog`, with `rsyslog-relp` for `omrelp`; `.ci/run`
//! installs both). Without one the tests skip, saying so, unless
//! `CARDINAL_REQUIRE_RSYSLOG=1` (CI), where they fail.

#![allow(
    dead_code,
    reason = "each test binary compiles this module; not all use all of it"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long rsyslog may take to start (read its configuration, load its
/// modules): well under a second here; ten mean it is stuck.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The rsyslogd to run, or `None` (the test then skips) when there is
/// none and CI does not require it.
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("CARDINAL_RSYSLOGD")
        .map_or_else(|| PathBuf::from("/usr/sbin/rsyslogd"), PathBuf::from);
    let relp = Path::new("/usr/lib/x86_64-linux-gnu/rsyslog/omrelp.so").exists()
        || std::env::var_os("CARDINAL_RSYSLOGD").is_some();
    if path.exists() && relp {
        return Some(path);
    }
    assert!(
        std::env::var_os("CARDINAL_REQUIRE_RSYSLOG").is_none(),
        "CARDINAL_REQUIRE_RSYSLOG is set but {} (with rsyslog-relp) is not there",
        path.display()
    );
    eprintln!(
        "skipped: no rsyslogd with omrelp (apt-get install rsyslog rsyslog-relp, or set \
         CARDINAL_RSYSLOGD)"
    );
    None
}

/// A running rsyslogd.
pub struct Rsyslog {
    child: Child,
    log: PathBuf,
}

impl Rsyslog {
    /// Starts `binary -n -f config` with its pid file and log in `dir`,
    /// after checking the configuration (`-N1`), so a mistake in it fails
    /// the test with rsyslog's own words.
    pub fn start(binary: &Path, dir: &Path, config: &Path) -> Rsyslog {
        let check = Command::new(binary)
            .args(["-N1", "-f"])
            .arg(config)
            .output()
            .expect("rsyslogd runs");
        assert!(
            check.status.success(),
            "rsyslog refuses its configuration:\n{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let log = dir.join("rsyslog.log");
        let out = std::fs::File::create(&log).expect("rsyslog's log");
        let pid = dir.join("rsyslog.pid");
        let child = Command::new(binary)
            .args(["-n", "-f"])
            .arg(config)
            .arg("-i")
            .arg(&pid)
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .expect("rsyslogd starts");
        let deadline = Instant::now() + START_TIMEOUT;
        while !pid.exists() {
            assert!(
                Instant::now() < deadline,
                "rsyslogd did not start within {START_TIMEOUT:?}:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Rsyslog { child, log }
    }

    /// What rsyslogd wrote to stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
