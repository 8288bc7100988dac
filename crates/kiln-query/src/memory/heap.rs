//! The process's heap, counted at the allocator, and its resident memory,
//! as the system counts it ([`resident`]).
//!
//! Why: DataFusion's pool holds what operators reserve, not everything a
//! query allocates (batches an aggregation emits, generated input, encoded
//! results). Counting every allocation, as ClickHouse's memory tracker
//! does, gives the server pool ([`super::ServerPool`]) the real figure, at
//! once, and including memory reserved before it is touched.
//!
//! The binary installs [`Counting`] as its global allocator. Each thread
//! keeps its own running difference and adds it to the shared counter only
//! once it passes [`FLUSH_BYTES`], so an allocation costs a thread-local
//! add, not a contended atomic; the figure is exact to within that much per
//! thread. Where the allocator is not installed (tests, embedding), there
//! is no figure and only the pool's accounting applies.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// How far a thread's count may drift before it is added to the total.
pub const FLUSH_BYTES: isize = 256 << 10;

static TOTAL: AtomicIsize = AtomicIsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static PENDING: Cell<isize> = const { Cell::new(0) };
}

/// A global allocator that counts the bytes live on the heap around
/// another one: `#[global_allocator] static A: Counting<MiMalloc> =
/// Counting(MiMalloc);`.
pub struct Counting<A>(pub A);

/// Bytes live on the heap now, if [`Counting`] is the global allocator.
pub fn allocated() -> Option<usize> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| TOTAL.load(Ordering::Relaxed).max(0) as usize)
}

/// Bytes of this process resident in memory now (`/proc/self/statm`),
/// where the system says; `None` elsewhere. A few microseconds: callers
/// keep the figure for a while ([`super::ServerPool`] for 10 ms).
pub fn resident() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
        // SAFETY: a plain query of a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Some(pages * usize::try_from(page).ok()?)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Turns transparent huge pages off for this process, unless
/// `MIMALLOC_ALLOW_THP` asks for them; the binary calls it first thing.
///
/// Why: mimalloc advises huge pages for its arenas, so the kernel backs
/// them 2 MiB at a time while the allocator returns them 64 KiB at a time.
/// With 200 spilling aggregations under a 1 GiB `--memory-limit`, resident
/// memory peaked 34-39% over the limit with huge pages and 17-22% over it
/// without (docs/reliability.md), and a dashboard server held 800 MB
/// instead of 540 MB. Databases commonly ask for them off for this reason.
pub fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: a plain system call setting a flag of this process.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

fn count(delta: isize) {
    // A const-initialised `Cell` needs no registration or destructor, so
    // this is safe inside the allocator and during thread teardown.
    PENDING.with(|p| {
        let pending = p.get() + delta;
        if pending.abs() >= FLUSH_BYTES {
            TOTAL.fetch_add(pending, Ordering::Relaxed);
            p.set(0);
        } else {
            p.set(pending);
        }
    });
}

fn installed() {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to the wrapped allocator with the same
// arguments; counting touches no allocator state.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            installed();
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            installed();
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { self.0.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}
