//! Durability for `cardinal serve`: a write-ahead log with group commit,
//! snapshots of the engine's state, recovery after a crash, and the file
//! layer they write through.
//!
//! - [`Wal`] ([`wal`]): records `(source, batch, payload)` appended from any
//!   thread, numbered, written by one writer thread and acknowledged once
//!   an `fdatasync` covers them ([`Ticket::wait`]). [`Wal::open`] checks
//!   every segment, cuts a torn tail (a record cut short by the end of the
//!   file, or reaching into a sector of zeros) and refuses damage (a
//!   complete record with a bad checksum, among others) with its segment,
//!   offset and claimed origin; a repair salvages every intact record and
//!   reports what it could not keep ([`Recovery`] says what it did);
//!   [`Wal::replay`] yields the records after a snapshot's sequence.
//! - [`Snapshots`] ([`snapshot`]): a [`Snapshot`] (WAL sequence, positions
//!   per source, named sections of bytes) written atomically, the newest
//!   [`SNAPSHOTS_KEPT`] kept, loaded newest-valid-first.
//! - [`Dir`] ([`fs`]): [`OsDir`] on a real directory, [`SimDir`] in memory
//!   with seeded power-cut crashes and injected I/O failures for tests.
//!
//! The crate sits beside the data path, after `rollup` and `chains` (whose
//! images the server puts in snapshot sections) and before `server`. It is
//! synchronous and owns one thread per open log: the group-commit writer.
//!
//! Recovery, as the server does it: load the newest snapshot, replay the
//! log after its sequence, append; after the next snapshot is durable,
//! trim the log through the oldest snapshot kept.
//!
//! ```
//! use std::sync::Arc;
//! use cardinal_store::{BatchId, Dir, SimDir, Snapshot, Snapshots, SourceId, Wal, WalOptions};
//!
//! let disk = SimDir::new();
//! let dir: Arc<dyn Dir> = Arc::new(disk.clone());
//! let (wal, _) = Wal::open(Arc::clone(&dir), WalOptions::default()).unwrap();
//! let ticket = wal.append(SourceId(1), BatchId(10), b"a,b,c\n".to_vec()).unwrap();
//! assert_eq!(ticket.wait().unwrap(), 1); // durable: acknowledge batch 10
//! let snapshots = Snapshots::new(Arc::clone(&dir));
//! let mut state = Snapshot { sequence: 1, ..Snapshot::default() };
//! state.positions.insert("wal".into(), 1);
//! snapshots.write(&state).unwrap();
//! wal.append(SourceId(1), BatchId(11), b"d,e,f\n".to_vec()).unwrap().wait().unwrap();
//! drop(wal);
//!
//! // A power cut, then recovery: the snapshot, and the log after it.
//! let after: Arc<dyn Dir> = Arc::new(disk.crash(7));
//! let loaded = Snapshots::new(Arc::clone(&after)).load_newest().unwrap().unwrap();
//! let (wal, recovery) = Wal::open(after, WalOptions::default()).unwrap();
//! assert_eq!(recovery.next_sequence, 3);
//! let mut replayed = Vec::new();
//! wal.replay(loaded.snapshot.sequence, |record| replayed.push(record.batch)).unwrap();
//! assert_eq!(replayed, vec![BatchId(11)]);
//! ```

#![deny(missing_docs)]

mod error;
pub mod fs;
pub mod snapshot;
pub mod wal;

pub use error::Error;
pub use fs::{Dir, DirFile, Fault, OsDir, SimDir};
pub use snapshot::{Loaded, SNAPSHOTS_KEPT, Snapshot, Snapshots};
pub use wal::{
    BatchId, Claimed, Cut, Lost, Moved, Record, Recovery, Repair, SYNC_RECORDS_BUCKETS,
    SYNC_SECONDS_BUCKETS, SourceId, Ticket, Wal, WalOptions, WalStats,
};
