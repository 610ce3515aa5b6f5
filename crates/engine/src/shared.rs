//! Inputs that several workers read in turns: compressed files and stdin.
//!
//! An input that cannot be split into byte ranges (a compressed file,
//! stdin, a pipe) is read by every worker, in turns of
//! [`SHARED_CHUNKS_PER_TURN`] chunks (4 MiB) taken in a fixed rotation
//! ([`SharedInput`]): a worker decodes its turn under the lock, then parses
//! and folds it while the next one decodes. Decompression overlaps the
//! fold instead of adding to it, and each worker reads the same chunks in
//! every run. Shorter turns moved the decoder between cores too often
//! ([`SHARED_CHUNKS_PER_TURN`] says what that cost).

use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Context, Result};
use cardinal_source::{Framing, LineReader};

use crate::fold::Fold;

/// An input that cannot be split into byte ranges (a compressed file, or
/// stdin), read by several workers at once. Decoding is sequential, so a
/// worker holds the lock only while it decodes its next turn of
/// [`SHARED_CHUNKS_PER_TURN`] chunks of whole lines, then parses and folds
/// them while the others decode theirs: with two workers, decompression
/// overlaps the fold instead of adding to it.
///
/// The workers ("participants", one job each) take their turns in a fixed
/// rotation, 0, 1, ..., 0, 1, ..., so that each reads the same chunks in
/// every run, and the run's answers are the same in every run. A
/// participant whose worker has ended ([`SharedInput::leave`]) is skipped.
#[derive(Debug)]
pub(crate) struct SharedInput {
    path: Option<PathBuf>,
    /// The reader, opened by the first worker to read (so that stdin is
    /// not touched at planning time), and whose turn is next.
    state: Mutex<SharedState>,
    /// Signalled when a turn ends or a participant leaves.
    turn_over: std::sync::Condvar,
    /// The input's header line, published (under the lock) by the worker
    /// that decodes the first chunk, before any later chunk is handed out.
    pub(crate) header: std::sync::OnceLock<Vec<u8>>,
    /// Where its records end ([`framing_of`](crate::jobs::framing_of) the
    /// stream).
    pub(crate) framing: Framing,
    /// Set by the first worker that finds the header does not fit the
    /// stream: the input is one reject, whichever workers find it.
    header_rejected: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
pub(crate) struct SharedState {
    /// `Done` once the input has ended or failed.
    reader: SharedReader,
    /// The participant whose turn is next.
    next: usize,
    /// Per participant: whether it has left (its turns are skipped).
    gone: Vec<bool>,
}

impl SharedState {
    /// Hands the turn to the first participant after `from` (cyclically)
    /// that has not left.
    fn pass(&mut self, from: usize) {
        let participants = self.gone.len();
        if let Some(next) = (1..=participants)
            .map(|step| (from + step) % participants)
            .find(|&p| !self.gone[p])
        {
            self.next = next;
        }
    }
}

/// Chunks a worker decodes in one turn at a shared input's lock (4 MiB).
/// Turns of one chunk handed the decoder to the other core every 256 KiB:
/// its window and tables came from the other core's cache each time, and
/// the waiting worker slept and was woken per chunk. Query 2A from zstd,
/// two workers, then spent 29% more CPU time in zstd than one worker did
/// and took about as long (5.1-5.6 s against 5.7). Turns of 4, 8, 16, 32
/// and 64 chunks: 16 was fastest for zstd and lz4, 5.07-5.56 -> 3.62-3.91
/// s and 3.79-3.97 -> 2.99-3.64 s (bench/JOURNAL.md,
/// "Smaller chunks, a faster line count, compressed inputs decoded in
/// turns; what KLL costs", 2026-11-22).
pub(crate) const SHARED_CHUNKS_PER_TURN: usize = 16;

#[derive(Debug)]
pub(crate) enum SharedReader {
    Unopened,
    Open(LineReader),
    Done,
}

/// What one read of a [`SharedInput`] gave, in a turn's order.
pub(crate) enum SharedRead {
    /// A chunk of lines; `first`: the input's first chunk, whose first
    /// line is the header.
    Chunk {
        first: bool,
    },
    End,
    /// A line longer than `LINE_BYTES_MAX` was skipped (the message and
    /// the bytes skipped).
    LineTooLong(String, u64),
    /// The input failed (the source's message: corrupt or cut compressed
    /// data, a read error): what came before it in the turn is folded
    /// first, and the rest of the input is not read.
    Failed(String),
    /// A checksum found damage in bytes already handed out
    /// ([`cardinal_source::Error::is_corrupt`]): the run must stop.
    Corrupt(String),
}

impl SharedInput {
    /// An input read in turns by `participants` workers.
    pub(crate) fn new(path: Option<PathBuf>, participants: usize) -> Self {
        assert!(participants >= 1, "an input needs a reader");
        Self {
            path,
            state: Mutex::new(SharedState {
                reader: SharedReader::Unopened,
                next: 0,
                gone: vec![false; participants],
            }),
            turn_over: std::sync::Condvar::new(),
            header: std::sync::OnceLock::new(),
            framing: Framing::Lines,
            header_rejected: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Participant `participant`'s next turn, once it is its turn (or the
    /// input has ended): decoded under the lock by [`Self::read_locked`],
    /// then the turn passes on.
    pub(crate) fn read_turn(
        &self,
        participant: usize,
        chunks: &mut [cardinal_source::Chunk],
        header: bool,
        reads: &mut Vec<SharedRead>,
    ) -> Result<()> {
        let mut state = self.state.lock().expect("shared input lock");
        while state.next != participant && !matches!(state.reader, SharedReader::Done) {
            state = self.turn_over.wait(state).expect("shared input lock");
        }
        let read = self.read_locked(&mut state.reader, chunks, header, reads);
        state.pass(participant);
        self.turn_over.notify_all();
        read
    }

    /// The input's header does not fit the stream: one reject for the
    /// input (by the first worker to find it), and nobody reads on.
    pub(crate) fn reject_header(&self, fold: &mut Fold<'_>, error: &cardinal_parse::Error) {
        if !self
            .header_rejected
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            fold.bad_header(error);
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.reader = SharedReader::Done;
        self.turn_over.notify_all();
    }

    /// Participant `participant` reads no more (its worker ended, well or
    /// not): its turns are skipped from now on.
    pub(crate) fn leave(&self, participant: usize) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.gone[participant] = true;
        if state.next == participant {
            state.pass(participant);
        }
        self.turn_over.notify_all();
    }

    /// Decodes one turn: read `i` into `chunks[i]`, its outcome pushed to
    /// `reads`, until the chunks are used up or the input ends or fails.
    /// With `header`, the input's first chunk's first line is also
    /// published as the header for workers whose first chunk comes later
    /// (the first chunk read, as a single reader's parser would take it:
    /// after a skipped over-long line, the next line).
    fn read_locked(
        &self,
        guard: &mut SharedReader,
        chunks: &mut [cardinal_source::Chunk],
        header: bool,
        reads: &mut Vec<SharedRead>,
    ) -> Result<()> {
        if matches!(*guard, SharedReader::Unopened) {
            let input = match &self.path {
                None => cardinal_source::Input::stdin()?,
                Some(path) => cardinal_source::Input::open(path)
                    .with_context(|| format!("opening {}", path.display()))?,
            };
            *guard = SharedReader::Open(LineReader::new(input).with_framing(self.framing));
        }
        for chunk in chunks {
            let SharedReader::Open(reader) = guard else {
                reads.push(SharedRead::End);
                return Ok(());
            };
            let read = match reader.read_chunk(chunk) {
                Ok(true) => {
                    let first = header && self.header.get().is_none();
                    if first {
                        let bytes = chunk.bytes();
                        let end = bytes
                            .iter()
                            .position(|&b| b == b'\n')
                            .map_or(bytes.len(), |i| i + 1);
                        let _ = self.header.set(bytes[..end].to_vec());
                    }
                    SharedRead::Chunk { first }
                }
                Ok(false) => {
                    *guard = SharedReader::Done;
                    SharedRead::End
                }
                Err(e) if e.is_recoverable() => {
                    SharedRead::LineTooLong(e.to_string(), e.skipped_bytes())
                }
                Err(e) => {
                    *guard = SharedReader::Done;
                    if e.is_corrupt() {
                        SharedRead::Corrupt(e.to_string())
                    } else {
                        SharedRead::Failed(e.to_string())
                    }
                }
            };
            let last = matches!(
                read,
                SharedRead::End | SharedRead::Failed(_) | SharedRead::Corrupt(_)
            );
            reads.push(read);
            if last {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;
    use std::io::Write;

    /// `lines` numbered CSV lines after a header, gzipped into a fresh
    /// file (cut to `keep` of its bytes, if given); the text and the path.
    fn gzipped(name: &str, lines: usize, keep: Option<usize>) -> (Vec<u8>, PathBuf) {
        let mut text = b"n,word\n".to_vec();
        for i in 0..lines {
            writeln!(text, "{i},word{}", i % 977).expect("write to a Vec");
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).expect("gzip");
        let mut bytes = gz.finish().expect("gzip");
        if let Some(keep) = keep {
            bytes.truncate(keep);
        }
        let path =
            std::env::temp_dir().join(format!("cardinal-shared-{}-{name}.gz", std::process::id()));
        std::fs::write(&path, bytes).expect("temp file");
        (text, path)
    }

    /// One chunk a turn handed out.
    struct Taken {
        first: bool,
        offset: u64,
        bytes: Vec<u8>,
    }

    /// What [`take_turns`] saw.
    struct Turns {
        chunks: Vec<Taken>,
        /// The error the input ended with, if it failed.
        failed: Option<String>,
        turns: usize,
    }

    /// Two workers' turns of two chunks each, in alternation, until the
    /// input ends or fails.
    fn take_turns(shared: &SharedInput) -> Turns {
        let mut workers = vec![vec![cardinal_source::Chunk::default(); 2]; 2];
        let mut seen = Turns {
            chunks: Vec::new(),
            failed: None,
            turns: 0,
        };
        for worker in (0..2).cycle() {
            let mut reads = Vec::new();
            shared
                .read_turn(worker, &mut workers[worker], true, &mut reads)
                .expect("opens");
            seen.turns += 1;
            assert!(!reads.is_empty() && reads.len() <= 2);
            for (read, chunk) in reads.into_iter().zip(&workers[worker]) {
                match read {
                    SharedRead::Chunk { first } => seen.chunks.push(Taken {
                        first,
                        offset: chunk.offset,
                        bytes: chunk.bytes().to_vec(),
                    }),
                    SharedRead::End => return seen,
                    SharedRead::Failed(message) | SharedRead::Corrupt(message) => {
                        seen.failed = Some(message);
                        return seen;
                    }
                    SharedRead::LineTooLong(m, _) => panic!("no long lines here: {m}"),
                }
            }
        }
        unreachable!("cycle ends by returning")
    }

    /// Turn by turn, the chunks cover the input once, in order, the first
    /// one says so and publishes the header; a later turn after the end
    /// reads the end again.
    #[test]
    fn turns_hand_out_every_chunk_once_in_order() {
        let (text, path) = gzipped("turns", 200_000, None);
        let shared = SharedInput::new(Some(path.clone()), 2);
        let Turns {
            chunks,
            failed,
            turns,
        } = take_turns(&shared);
        assert_eq!(failed, None);
        assert!(chunks.len() >= 6, "{} chunks", chunks.len());
        assert!(turns >= 3, "{turns} turns");
        assert!(chunks[0].first && chunks[1..].iter().all(|c| !c.first));
        assert_eq!(
            shared.header.get().map(Vec::as_slice),
            Some(&b"n,word\n"[..])
        );
        let mut offset = 0;
        for chunk in &chunks {
            assert_eq!(chunk.offset, offset);
            assert!(chunk.bytes.ends_with(b"\n"));
            offset += chunk.bytes.len() as u64;
        }
        assert_eq!(concat(&chunks), text);
        assert_ends(&shared);
        let _ = std::fs::remove_file(path);
    }

    /// A corrupt input fails inside a turn: the chunks before the failure
    /// are handed out first, and every turn after it reads the end.
    #[test]
    fn a_failure_ends_the_turn_after_the_chunks_before_it() {
        let (text, path) = gzipped("cut", 200_000, Some(200_000));
        let shared = SharedInput::new(Some(path.clone()), 2);
        let Turns { chunks, failed, .. } = take_turns(&shared);
        let failed = failed.expect("a cut gzip stream fails");
        assert!(failed.contains("cut.gz"), "{failed}");
        assert!(!chunks.is_empty());
        let read = concat(&chunks);
        assert!(text.starts_with(&read) && read.len() < text.len());
        assert_ends(&shared);
        let _ = std::fs::remove_file(path);
    }

    /// A turn after the input ended reads only the end.
    fn assert_ends(shared: &SharedInput) {
        let mut reads = Vec::new();
        let mut turn = vec![cardinal_source::Chunk::default(); 2];
        shared
            .read_turn(1, &mut turn, true, &mut reads)
            .expect("ended");
        assert!(matches!(reads[..], [SharedRead::End]));
    }

    /// Workers on threads of their own take their turns in rotation, 0, 1,
    /// 2, 0, ..., however the threads are scheduled; once one leaves, the
    /// others take its turns, and the input is read whole.
    #[test]
    fn threads_take_turns_in_rotation_and_skip_who_left() {
        let (text, path) = gzipped("rotation", 600_000, None);
        let shared = SharedInput::new(Some(path.clone()), 3);
        // (participant, offset of each chunk it read), in the order read.
        let order = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for participant in 0..3 {
                let (shared, order) = (&shared, &order);
                scope.spawn(move || {
                    let mut turn = vec![cardinal_source::Chunk::default(); 1];
                    let mut reads = Vec::new();
                    for taken in 0.. {
                        // Participant 2 leaves after its third turn.
                        if participant == 2 && taken == 3 {
                            shared.leave(2);
                            return;
                        }
                        reads.clear();
                        shared
                            .read_turn(participant, &mut turn, true, &mut reads)
                            .expect("opens");
                        match reads[..] {
                            [SharedRead::Chunk { .. }] => {
                                let mut order = order.lock().expect("order");
                                order.push((participant, turn[0].offset, turn[0].bytes().to_vec()));
                            }
                            [SharedRead::End] => return,
                            _ => panic!("one chunk a turn"),
                        }
                    }
                });
            }
        });
        let mut order = order.into_inner().expect("order");
        assert!(order.len() > 20, "{} turns", order.len());
        // A turn's chunk follows the turn before's (read under the lock;
        // recorded after it, so perhaps out of order): the turns in offset
        // order are taken by participants in rotation, 2 only for its
        // three turns.
        order.sort_by_key(|&(_, offset, _)| offset);
        let who: Vec<usize> = order.iter().map(|&(p, _, _)| p).collect();
        assert_eq!(who[..9], [0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert!(who[9..].chunks(2).all(|pair| pair == [0, 1] || pair == [0]));
        let read: Vec<u8> = order.into_iter().flat_map(|(_, _, bytes)| bytes).collect();
        assert_eq!(read, text);
        let _ = std::fs::remove_file(path);
    }

    /// The chunks' bytes back to back.
    fn concat(chunks: &[Taken]) -> Vec<u8> {
        chunks
            .iter()
            .flat_map(|c| c.bytes.iter().copied())
            .collect()
    }
}
