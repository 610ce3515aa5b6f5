//! Filled in by the syslog work in progress.
