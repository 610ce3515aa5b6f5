//! Arena memory: 2 MiB chunks mapped from the kernel, and a thread that
//! faults them in ahead of need, on transparent huge pages.
//!
//! At 200M users every append touches three or four random lines of a
//! 16 GB heap, and on a VM each TLB miss is a two-dimensional page walk: it
//! was the store's largest cost (bench/JOURNAL.md, "Expiry by the clock").
//! Backing the arena with 2 MiB huge pages makes one TLB entry cover 512
//! times the bytes. The price is the first touch: the kernel zeroes 2 MiB
//! at once, and when memory is fragmented compacts it first (~5 ms here,
//! five times the worst operation). So no huge page is ever touched
//! first on the appending thread:
//!
//! - a chunk the arena maps itself ([`Chunk::map_lazy`]) is not advised
//!   for huge pages: its 4 KiB pages fault in one at a time as slots are
//!   carved, as the allocator's memory did before;
//! - once an arena holds [`PREFAULT_AFTER_CHUNKS`] chunks it takes its
//!   chunks from a process-wide pool that the prefault thread keeps at
//!   [`READY_CHUNKS`] per such arena: mapped, advised `MADV_HUGEPAGE` and
//!   written to ([`Chunk::map_faulted`]), so the arena receives memory
//!   already backed by huge pages. Taking one is a pop under a lock, once
//!   per 2 MiB of pages; an empty pool makes the arena map a lazy chunk
//!   itself (counted) rather than wait;
//! - a chunk is exactly one huge page, 2 MiB-aligned, so "every page of the
//!   chunk is free" is "the huge page is free": the arena then unmaps the
//!   chunk whole ([`Chunk`]'s drop). A page returned from a chunk that
//!   still holds others is released with `MADV_DONTNEED` ([`Chunk::release`]):
//!   its bytes go back to the kernel and read as zeroes again, and a later
//!   touch faults 4 KiB pages, never a fresh huge page (the huge page is
//!   split, not empty).
//!
//! [`set_huge_pages`] turns the advice off for a process that puts the
//! latency tail first: chunks are still faulted in ahead, on 4 KiB pages.
//!
//! The prefault thread is one per process, started by the first arena to
//! pass the threshold, and serves every arena; it shares nothing with them
//! but the pool.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Once, PoisonError};

/// Bytes of one chunk: one x86-64 huge page.
pub(crate) const CHUNK_BYTES: usize = 2 << 20;

/// Chunks an arena maps itself before it asks for chunks faulted in ahead:
/// a small store (a test, a lightly used shard group) never holds a chunk
/// it has not touched, nor starts the prefault thread.
pub(crate) const PREFAULT_AFTER_CHUNKS: usize = 4;

/// Chunks the process keeps faulted in ahead of need for each arena that
/// has passed [`PREFAULT_AFTER_CHUNKS`]. Two chunks are 4 MiB of resident
/// memory per shard group, used up in about 70 ms by the fastest-growing
/// benchmark (new users at 2M appends per second); the prefault thread
/// fills one in well under 10 ms.
pub(crate) const READY_CHUNKS: usize = 2;

/// Bytes of arena chunks this process holds mapped (in arenas and in the
/// pool of chunks faulted in ahead).
static MAPPED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Whether chunks faulted in ahead are advised for huge pages.
static HUGE_PAGES: AtomicBool = AtomicBool::new(true);

/// Whether the chunks faulted in ahead from now on are advised for
/// transparent huge pages (the default) or stay on 4 KiB pages (still
/// faulted in off the appending thread). Huge pages take most TLB misses
/// out of a large store (bench/JOURNAL.md, "Journeys": ~15% more appends
/// per CPU-second at 200M users), but on some machines memory on huge
/// pages has a longer tail of millisecond stalls whatever runs on it (the
/// benchmark's control loop shows it); a server that puts the tail first
/// turns them off, as Redis advises for its own heap.
pub fn set_huge_pages(on: bool) {
    HUGE_PAGES.store(on, Ordering::Relaxed);
}

/// Bytes of arena chunks this process holds mapped: every arena's chunks
/// and the pool of chunks faulted in ahead ([`arena_ready_bytes`]). The
/// memory tests compare it with what the stores report.
pub fn arena_mapped_bytes() -> u64 {
    MAPPED_BYTES.load(Ordering::Relaxed)
}

/// One 2 MiB-aligned anonymous mapping of [`CHUNK_BYTES`], owned: unmapped
/// on drop.
#[derive(Debug)]
pub(crate) struct Chunk {
    ptr: NonNull<u8>,
}

// SAFETY: a `Chunk` owns its mapping exclusively (like a `Box<[u8]>`); the
// bytes are only reached through `&self` / `&mut self`.
unsafe impl Send for Chunk {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// A chunk whose 4 KiB pages fault in as they are first touched (no
    /// huge-page advice): what the arena maps on its own thread.
    pub(crate) fn map_lazy() -> io::Result<Chunk> {
        Chunk::map_aligned()
    }

    /// A chunk advised for huge pages and written to, so its memory is
    /// resident (on one huge page when the kernel has one) before the arena
    /// gets it: what the prefault thread makes.
    fn map_faulted() -> io::Result<Chunk> {
        let mut chunk = Chunk::map_aligned()?;
        if HUGE_PAGES.load(Ordering::Relaxed) {
            chunk.advise_huge();
        }
        // One write per 4 KiB page: with a huge page the first write faults
        // all 2 MiB in, without one (THP off) every page still gets faulted
        // here rather than on the appending thread.
        let base = chunk.ptr.as_ptr();
        for offset in (0..CHUNK_BYTES).step_by(4096) {
            // SAFETY: `offset < CHUNK_BYTES`, inside the mapping, which is
            // readable and writable and owned by `chunk`. A volatile write
            // of the zero the page already holds: the fault is the point.
            unsafe { base.add(offset).write_volatile(0) };
        }
        Ok(chunk)
    }

    /// The chunk's bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is CHUNK_BYTES long, readable, initialized
        // (anonymous memory reads as zeroes, released pages too), and lives
        // as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), CHUNK_BYTES) }
    }

    /// The chunk's bytes, writable.
    #[inline]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), CHUNK_BYTES) }
    }

    /// Gives the bytes of `offset .. offset + len` back to the kernel: they
    /// stop counting in RSS and read as zeroes. `offset` and `len` must be
    /// multiples of 4 KiB.
    pub(crate) fn release(&mut self, offset: usize, len: usize) {
        assert!(
            offset.is_multiple_of(4096) && len.is_multiple_of(4096) && offset + len <= CHUNK_BYTES
        );
        #[cfg(unix)]
        {
            // SAFETY: the range lies inside this chunk's own mapping, which
            // nothing else references (`&mut self`); MADV_DONTNEED on
            // private anonymous memory only replaces it with zero pages.
            let rc = unsafe {
                libc::madvise(
                    self.ptr.as_ptr().add(offset).cast(),
                    len,
                    libc::MADV_DONTNEED,
                )
            };
            if rc == 0 {
                return;
            }
        }
        // No madvise (or it failed): keep the memory, but honour "reads as
        // zeroes".
        self.bytes_mut()[offset..offset + len].fill(0);
    }

    #[cfg(unix)]
    fn map_aligned() -> io::Result<Chunk> {
        // An anonymous mapping whose length is a multiple of the huge-page
        // size starts on a huge-page boundary on Linux 6.7 and later; on
        // older kernels map one chunk more and trim both ends.
        let ptr = mmap(CHUNK_BYTES)?;
        let ptr = if (ptr as usize).is_multiple_of(CHUNK_BYTES) {
            ptr
        } else {
            munmap(ptr, CHUNK_BYTES);
            let wide = mmap(2 * CHUNK_BYTES)?;
            let lead = (CHUNK_BYTES - (wide as usize) % CHUNK_BYTES) % CHUNK_BYTES;
            // SAFETY: `lead < CHUNK_BYTES`: inside the wide mapping.
            let start = unsafe { wide.add(lead) };
            if lead > 0 {
                munmap(wide, lead);
            }
            // SAFETY: `start + CHUNK_BYTES <= wide + 2 * CHUNK_BYTES`.
            let tail = unsafe { start.add(CHUNK_BYTES) };
            let tail_len = CHUNK_BYTES - lead;
            if tail_len > 0 {
                munmap(tail, tail_len);
            }
            start
        };
        MAPPED_BYTES.fetch_add(CHUNK_BYTES as u64, Ordering::Relaxed);
        Ok(Chunk {
            ptr: NonNull::new(ptr).expect("mmap never returns null on success"),
        })
    }

    #[cfg(not(unix))]
    fn map_aligned() -> io::Result<Chunk> {
        let layout =
            std::alloc::Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).expect("a power of two");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        MAPPED_BYTES.fetch_add(CHUNK_BYTES as u64, Ordering::Relaxed);
        Ok(Chunk { ptr })
    }

    fn advise_huge(&mut self) {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: the whole of this chunk's own mapping. A kernel
            // without transparent huge pages answers EINVAL: the chunk then
            // stays on 4 KiB pages, which is only slower.
            let _ = unsafe {
                libc::madvise(self.ptr.as_ptr().cast(), CHUNK_BYTES, libc::MADV_HUGEPAGE)
            };
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        MAPPED_BYTES.fetch_sub(CHUNK_BYTES as u64, Ordering::Relaxed);
        #[cfg(unix)]
        munmap(self.ptr.as_ptr(), CHUNK_BYTES);
        #[cfg(not(unix))]
        {
            let layout = std::alloc::Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES)
                .expect("a power of two");
            // SAFETY: allocated in `map_aligned` with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

#[cfg(unix)]
fn mmap(len: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh private anonymous mapping at an address of the
    // kernel's choosing: it aliases nothing.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(ptr.cast())
    }
}

#[cfg(unix)]
fn munmap(ptr: *mut u8, len: usize) {
    // SAFETY: callers pass a range of a mapping they own and no longer use.
    let rc = unsafe { libc::munmap(ptr.cast(), len) };
    debug_assert_eq!(rc, 0, "munmap of an owned range");
}

/// Chunks faulted in ahead of need, shared by every arena of the process,
/// and how many the arenas want kept ready.
#[derive(Debug)]
struct Pool {
    ready: Vec<Chunk>,
    /// [`READY_CHUNKS`] per arena that has passed [`PREFAULT_AFTER_CHUNKS`].
    wanted: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    ready: Vec::new(),
    wanted: 0,
});
static POOL_CHANGED: Condvar = Condvar::new();

fn pool() -> MutexGuard<'static, Pool> {
    // A panic while holding the lock cannot leave the pool inconsistent
    // (a push or a pop), so a poisoned lock is still good.
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps the pool at what the arenas want: faults chunks in while it has
/// fewer, unmaps the surplus when an arena that wanted some is dropped.
/// Maps and writes outside the lock, so an arena taking a chunk never
/// waits for a fault.
fn prefault_thread() {
    let mut pool = pool();
    loop {
        if pool.ready.len() > pool.wanted {
            let wanted = pool.wanted;
            let surplus = pool.ready.split_off(wanted);
            drop(pool);
            drop(surplus);
            pool = self::pool();
        } else if pool.ready.len() < pool.wanted {
            drop(pool);
            let chunk = Chunk::map_faulted();
            pool = self::pool();
            match chunk {
                Ok(chunk) => pool.ready.push(chunk),
                // Out of memory: the arenas map on their own (and report
                // the error if that fails too); try again when one takes.
                Err(_) => {
                    pool = POOL_CHANGED
                        .wait(pool)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        } else {
            pool = POOL_CHANGED
                .wait(pool)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Starts the process's prefault thread if it is not running yet. The
/// first arena to need it starts it otherwise, paying the spawn (tens of
/// microseconds) inside an append; a server may call this at startup. The
/// allocation-counting tests call it before they count.
pub fn start_prefault_thread() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        std::thread::Builder::new()
            .name("chains-prefault".into())
            .spawn(prefault_thread)
            .expect("spawn the prefault thread");
    });
}

/// Bytes of chunks faulted in ahead of need and not yet taken by an arena:
/// resident memory the process holds for the arenas' next pages.
pub fn arena_ready_bytes() -> u64 {
    pool().ready.len() as u64 * CHUNK_BYTES as u64
}

/// One arena's way to chunks: mapped on its own thread while it is small,
/// from the process's pool of faulted-in chunks once it has passed
/// [`PREFAULT_AFTER_CHUNKS`]. Allocates nothing on the heap itself.
#[derive(Debug, Default)]
pub(crate) struct Reserve {
    /// This arena counts in the pool's `wanted`.
    registered: bool,
    /// Chunks the arena had to map itself after it started prefaulting
    /// (the pool was empty): their pages fault in on the appending thread.
    pub(crate) mapped_inline: u64,
}

impl Reserve {
    /// A chunk for an arena that holds `held` chunks.
    pub(crate) fn take(&mut self, held: usize) -> io::Result<Chunk> {
        if held < PREFAULT_AFTER_CHUNKS {
            return Chunk::map_lazy();
        }
        let ready = {
            let mut pool = pool();
            if !self.registered {
                self.registered = true;
                pool.wanted += READY_CHUNKS;
            }
            pool.ready.pop()
        };
        start_prefault_thread();
        POOL_CHANGED.notify_one();
        match ready {
            Some(chunk) => Ok(chunk),
            None => {
                self.mapped_inline += 1;
                Chunk::map_lazy()
            }
        }
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        if self.registered {
            pool().wanted -= READY_CHUNKS;
            POOL_CHANGED.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_aligned_zeroed_and_released_to_zeroes() {
        let mut chunk = Chunk::map_lazy().expect("map");
        assert_eq!(chunk.bytes().as_ptr() as usize % CHUNK_BYTES, 0);
        assert!(chunk.bytes().iter().all(|&b| b == 0));
        chunk.bytes_mut()[4096..8192].fill(7);
        chunk.bytes_mut()[CHUNK_BYTES - 1] = 9;
        chunk.release(4096, 4096);
        assert!(chunk.bytes()[4096..8192].iter().all(|&b| b == 0));
        assert_eq!(chunk.bytes()[CHUNK_BYTES - 1], 9, "outside the range kept");
    }

    #[test]
    fn the_reserve_prefaults_past_its_threshold() {
        // Below the threshold a chunk is mapped lazily, and the pool is not
        // asked for anything.
        let mut reserve = Reserve::default();
        let _small = reserve.take(0).expect("map");
        assert!(!reserve.registered);
        // At the threshold the arena registers and the pool fills (other
        // tests of this binary may hold chunks of the pool too: wait for
        // at least this reserve's share).
        let _first = reserve.take(PREFAULT_AFTER_CHUNKS).expect("map");
        assert!(reserve.registered);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pool().ready.len() < READY_CHUNKS {
            assert!(
                std::time::Instant::now() < deadline,
                "the pool never filled"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let inline = reserve.mapped_inline;
        let chunk = reserve.take(PREFAULT_AFTER_CHUNKS + 1).expect("ready");
        assert_eq!(reserve.mapped_inline, inline, "taken from the pool");
        assert_eq!(chunk.bytes().as_ptr() as usize % CHUNK_BYTES, 0);
        assert!(chunk.bytes().iter().all(|&b| b == 0));
    }
}
