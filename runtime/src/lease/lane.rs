//! [`Lane`]: the lock-free road of one piece of shared state for its common
//! case — one thread holding it, every scope asking for one value.
//!
//! A lane is *biased* to one thread, its owner. While it is, the owner's
//! scopes on the state are slots of the lane: a mask of open slots and the
//! value's code in one word, the owner's own (a word of its [`Words`],
//! which no other thread writes), read and written with plain loads and
//! stores: no lock and no read-modify-write, so a scope costs the state's
//! own libtorch calls and a few loads and stores. The bias outlives the
//! scopes, so a loop of scopes on one thread never takes the lock.
//!
//! Everything else takes the caller's lock, and the first thing done under
//! it is [`Lane::settle`]: a biased lane hands its slots to the lock's
//! record ([`Leases::adopt`](super::Leases::adopt): one holder, the
//! owner's, active on its thread) and loses its bias. A thread settling
//! another's lane must know the owner is not half-way through a step. The
//! owner marks each step busy in its word, then reads whether it still
//! owns the lane; the settling thread takes the lane away, makes every
//! thread of the process pass a full memory barrier (`membarrier(2)`),
//! then waits for the busy mark to clear. After that barrier either the
//! owner's mark is visible or the owner sees that it lost the lane (the
//! asymmetric Dekker pattern of biased locks): the fence every step would
//! need is paid once, by the rare thread that settles another's lane.
//! Without `membarrier` no lane is ever biased and everything takes the
//! lock.
//!
//! The word is the owner's alone because an owner may mark a step busy
//! just after it lost the lane (it finds out on the check that follows):
//! in a shared word that store would land on the next owner's slots.
//!
//! A lane is biased only while the lock's record is empty (that record is
//! the truth whenever it holds entries), and after [`REBIAS`] settles by
//! other threads never again: state that threads use in turn stays on the
//! lock rather than pay a barrier at every turn.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, compiler_fence};
use std::sync::{Arc, OnceLock};

/// `owner`: no thread. Thread ids count up from 1, and a thread being torn
/// down reads as 0 (`crate::lease::me`), which no lane is ever biased to.
const FREE: u64 = u64::MAX - 1;
/// `owner`: being settled, or never to be biased again.
const CLOSED: u64 = u64::MAX;

/// A slot's ticket: this bit over the slot's number. The lock's record
/// counts its own tickets up from 1, far below it.
pub(crate) const SLOT_TICKET: u64 = 1 << 63;

/// An owner's word: open slots (bits 0..16), the value's code (16..24),
/// busy (24).
const SLOTS: u64 = (1 << 16) - 1;
const CODE_SHIFT: u32 = 16;
const BUSY: u64 = 1 << 24;

/// Settles by other threads after which a lane stays on the lock (in unit
/// tests never, so that their threads race the owner's steps throughout).
const REBIAS: u32 = if cfg!(test) { 1 << 30 } else { 4 };

/// Lanes that can ever be biased (each has a word in every thread's
/// [`Words`]); the ones made past this stay on the lock.
const LANES: usize = 256;
/// Each lane's place in [`Words`], handed out on its first bias.
static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);

/// A thread's words, one per lane, and one more that no lane owns (where
/// the lanes not yet biased point: no bound to check on the hot path).
/// Shared (`Arc`) with the lanes biased to the thread, so that a thread
/// settling one after the owner exited reads live memory.
struct Words([AtomicU64; LANES + 1]);

/// This thread's words while it lives: `MINE` owns them, `MINE_AT` points
/// to them for the hot path (a plain cell: no destructor, so no check of
/// the thread-local's state per access).
struct Mine(Arc<Words>);

impl Drop for Mine {
    fn drop(&mut self) {
        MINE_AT.set(std::ptr::null());
    }
}

thread_local! {
    static MINE: Mine = {
        let words = Mine(Arc::new(Words(std::array::from_fn(|_| AtomicU64::new(0)))));
        MINE_AT.set(Arc::as_ptr(&words.0));
        words
    };
    static MINE_AT: Cell<*const Words> = const { Cell::new(std::ptr::null()) };
}

/// This thread's word `i` (`i <= LANES`; null while the thread has no
/// words: before its first bias, and while it is torn down).
#[inline(always)]
fn my_word(i: usize) -> *const AtomicU64 {
    let at = MINE_AT.get();
    if at.is_null() {
        return std::ptr::null();
    }
    debug_assert!(i <= LANES);
    // SAFETY: `MINE` holds the words while `MINE_AT` points to them, and
    // a lane's index is at most `LANES`.
    unsafe { (&raw const (*at).0).cast::<AtomicU64>().add(i) }
}

/// The lock-free road of one piece of state; see the [module docs](self).
/// `V` is a scope's value, `Saved` the state found before the first scope;
/// a `KEYED` lane serves many pieces of state, one at a time, by key (a
/// lane of one piece ignores its key: no check on its hot path).
pub(crate) struct Lane<V, Saved, const KEYED: bool = false> {
    /// The owner's thread id (`crate::lease::me`), [`FREE`] or [`CLOSED`];
    /// changed only under the caller's lock.
    owner: AtomicU64,
    /// Which piece of state the lane is biased to, where lanes are shared
    /// (models, by id); changed only under the caller's lock.
    key: AtomicUsize,
    /// The lane's word in every thread's [`Words`]; `LANES` (the word no
    /// lane owns) until its first bias.
    index: AtomicUsize,
    /// Times another thread settled the lane (under the caller's lock).
    taken: AtomicU32,
    /// The owner's words (under the caller's lock).
    words: UnsafeCell<Option<Arc<Words>>>,
    /// The open slots' value and the state before the first: the owner's
    /// inside a busy step, the settling thread's after it waited.
    value: UnsafeCell<Option<V>>,
    saved: UnsafeCell<Option<Saved>>,
}

// SAFETY: `words` is touched only under the caller's lock. `value` and
// `saved` are touched only by the owner inside a busy step, or under the
// caller's lock by a thread that took the lane away and then waited for
// the busy mark to clear (Release/Acquire on the owner's word), so never
// by two threads at once; what they hold moves between threads.
unsafe impl<V: Send, Saved: Send, const KEYED: bool> Sync for Lane<V, Saved, KEYED> {}

/// A settled lane's slots, for [`Leases::adopt`](super::Leases::adopt).
pub(crate) struct Taken<V, Saved> {
    pub(crate) thread: u64,
    /// The open slots, one bit each.
    pub(crate) slots: u64,
    pub(crate) value: V,
    pub(crate) saved: Option<Saved>,
}

/// The owner's busy mark; dropping it publishes `to` (so a panicking
/// libtorch or model call cannot leave the lane busy for ever).
struct Busy<'a> {
    word: &'a AtomicU64,
    to: u64,
}

impl Drop for Busy<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: whoever settles the lane after this sees the cells.
        self.word.store(self.to, Ordering::Release);
    }
}

impl<V, Saved, const KEYED: bool> Lane<V, Saved, KEYED> {
    pub(crate) const fn new() -> Self {
        Self {
            owner: AtomicU64::new(FREE),
            key: AtomicUsize::new(0),
            index: AtomicUsize::new(LANES),
            taken: AtomicU32::new(0),
            words: UnsafeCell::new(None),
            value: UnsafeCell::new(None),
            saved: UnsafeCell::new(None),
        }
    }

    /// This thread's word for this lane, if the lane may be biased to it
    /// for `key`. Whether it is, `begin` checks: a thread that is not the
    /// owner only marks its own word busy and back.
    #[inline(always)]
    fn word(&self, key: usize) -> Option<&AtomicU64> {
        if KEYED && self.key.load(Ordering::Relaxed) != key {
            return None;
        }
        let w = my_word(self.index.load(Ordering::Relaxed));
        // SAFETY: null, or a word of this thread's live `Words`; used only
        // within this call of the owner's.
        unsafe { w.as_ref() }
    }

    /// Opens a slot for thread `me` asking for `value` (`code`, equal only
    /// for values equal in every respect) on state `key`, if the lane is
    /// biased to `me` for `key` and its open slots ask for the same value;
    /// `first` saves the state and applies `value` when no slot is open,
    /// and returns the saved state for the lane to keep, or `None` where
    /// the caller's guard keeps it (it then hands it to [`leave`]'s `f`).
    /// `None`: take the lock.
    ///
    /// [`leave`]: Self::leave
    #[inline]
    pub(crate) fn enter<E>(
        &self,
        me: u64,
        key: usize,
        code: u8,
        value: &V,
        first: impl FnOnce(&V) -> Result<Option<Saved>, E>,
    ) -> Option<Result<u64, E>>
    where
        V: Clone,
    {
        let word = self.word(key)?;
        let s = word.load(Ordering::Relaxed);
        let open = s & SLOTS;
        if open == SLOTS || (open != 0 && s >> CODE_SHIFT & 0xff != u64::from(code)) {
            return None;
        }
        let mut busy = self.begin(me, word, s)?;
        if open == 0 {
            let saved = match first(value) {
                Ok(saved) => saved,
                Err(e) => return Some(Err(e)),
            };
            // SAFETY: inside the owner's busy step (see `Sync` above). Both
            // cells are empty with no slot open (the last slot, or `settle`,
            // took them): written without dropping what was there, which
            // `saved` would do out of line.
            unsafe {
                if saved.is_some() {
                    self.saved.get().write(saved);
                }
                *self.value.get() = Some(value.clone());
            }
        }
        let slot = (!open & SLOTS).trailing_zeros();
        busy.to = open | 1 << slot | u64::from(code) << CODE_SHIFT;
        Some(Ok(SLOT_TICKET | u64::from(slot)))
    }

    /// Closes the slot of `ticket` on state `key` for thread `me`, and
    /// runs `f(last, saved)` inside the step (so nobody sets the state
    /// between): `last` when no other slot stays open, `saved` the state
    /// the lane keeps (`f` restores it when last, or leaves there what its
    /// guard kept when not). `None`, and `f` not run, when the ticket is
    /// not an open slot of a lane biased to `me` for `key` (take the lock).
    #[inline]
    pub(crate) fn leave<R>(
        &self,
        me: u64,
        key: usize,
        ticket: u64,
        f: impl FnOnce(bool, &mut Option<Saved>) -> R,
    ) -> Option<R> {
        if ticket & SLOT_TICKET == 0 {
            return None;
        }
        let word = self.word(key)?;
        let bit = 1 << (ticket & !SLOT_TICKET & 63);
        let s = word.load(Ordering::Relaxed);
        if s & bit & SLOTS == 0 {
            return None;
        }
        let mut busy = self.begin(me, word, s)?;
        busy.to = s & !bit;
        let last = busy.to & SLOTS == 0;
        if last {
            busy.to = 0;
        }
        // SAFETY: inside the owner's busy step (see `Sync` above).
        let (value, saved) = unsafe { (&mut *self.value.get(), &mut *self.saved.get()) };
        let r = f(last, saved);
        if last {
            *value = None;
            if saved.is_some() {
                *saved = None;
            }
        }
        Some(r)
    }

    /// Marks a step of the owner `me` busy in its word, then checks that it
    /// still owns the lane (`None`, the mark undone, when it lost it).
    #[inline(always)]
    fn begin<'a>(&self, me: u64, word: &'a AtomicU64, s: u64) -> Option<Busy<'a>> {
        word.store(s | BUSY, Ordering::Relaxed);
        // The mark comes before the check in program order; `settle`'s
        // membarrier makes that order hold for other threads too.
        compiler_fence(Ordering::SeqCst);
        let busy = Busy { word, to: s };
        (self.owner.load(Ordering::Acquire) == me).then_some(busy)
    }

    /// Under the caller's lock: takes a lane biased for `key` away from its
    /// owner (waiting out a step in progress) and returns its open slots,
    /// for the lock's record. Nothing when the lane is not biased for `key`.
    pub(crate) fn settle(&self, me: u64, key: usize) -> Option<Taken<V, Saved>> {
        let owner = self.owner.load(Ordering::Acquire);
        if owner == FREE || owner == CLOSED || (KEYED && self.key.load(Ordering::Relaxed) != key) {
            return None;
        }
        self.owner.store(CLOSED, Ordering::SeqCst);
        let mut taken = self.taken.load(Ordering::Relaxed);
        if owner != me {
            // The owner may be in a step that read it still owned the
            // lane; after the barrier its busy mark shows.
            barrier();
            taken += 1;
            self.taken.store(taken, Ordering::Relaxed);
        }
        // SAFETY: under the caller's lock.
        let words = unsafe { (*self.words.get()).take() };
        let i = self.index.load(Ordering::Relaxed);
        let s = match words.as_ref().and_then(|w| w.0.get(i)) {
            Some(word) => wait_out(word),
            None => 0,
        };
        // SAFETY: the lane is taken away and its owner's last step is over.
        let (value, saved) = unsafe { ((*self.value.get()).take(), (*self.saved.get()).take()) };
        let next = if taken >= REBIAS { CLOSED } else { FREE };
        self.owner.store(next, Ordering::Release);
        let slots = s & SLOTS;
        match value {
            Some(value) if slots != 0 => Some(Taken {
                thread: owner,
                slots,
                value,
                saved,
            }),
            _ => None,
        }
    }

    /// Under the caller's lock, with nothing of `key` in its record: biases
    /// the lane to `me` for `key` and opens the first slot (see
    /// [`enter`](Self::enter)). `None` when the lane cannot be had: biased
    /// to another thread or state, closed, or no `membarrier` here.
    pub(crate) fn acquire<E>(
        &self,
        me: u64,
        key: usize,
        code: u8,
        value: &V,
        first: impl FnOnce(&V) -> Result<Option<Saved>, E>,
    ) -> Option<Result<u64, E>>
    where
        V: Clone,
    {
        if me == 0 || me >= FREE || !barrier_ready() {
            return None;
        }
        let mut i = self.index.load(Ordering::Relaxed);
        if i == LANES {
            i = NEXT_LANE.fetch_add(1, Ordering::Relaxed);
            if i >= LANES {
                // Past the words there are: this lane stays on the lock.
                return None;
            }
            self.index.store(i, Ordering::Relaxed);
        }
        let mine = MINE.try_with(|m| m.0.clone()).ok()?;
        let word = &mine.0[i];
        match self.owner.load(Ordering::Acquire) {
            FREE => {}
            // Its own idle lane, perhaps for another model: no one else
            // writes it.
            o if o == me && word.load(Ordering::Relaxed) & SLOTS == 0 => {}
            _ => return None,
        }
        // A fresh word: what an earlier bias left there is stale.
        word.store(0, Ordering::Relaxed);
        // SAFETY: under the caller's lock.
        unsafe { *self.words.get() = Some(mine) };
        self.key.store(key, Ordering::Relaxed);
        self.owner.store(me, Ordering::Release);
        self.enter(me, key, code, value, first)
    }
}

/// Waits until the owner's `word` shows no step in progress; its value.
fn wait_out(word: &AtomicU64) -> u64 {
    let mut spins = 0u32;
    loop {
        let s = word.load(Ordering::Acquire);
        if s & BUSY == 0 {
            return s;
        }
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
impl<V, Saved, const KEYED: bool> Lane<V, Saved, KEYED> {
    /// Whether the lane is biased to thread `me` (tests: the lock-free road
    /// was taken).
    pub(crate) fn biased_to(&self, me: u64) -> bool {
        self.owner.load(Ordering::Acquire) == me
    }

    /// Whether this process can bias lanes at all.
    pub(crate) fn can_bias() -> bool {
        barrier_ready()
    }

    /// Times another thread took the lane from its owner.
    pub(crate) fn taken(&self) -> u32 {
        self.taken.load(Ordering::Relaxed)
    }
}

#[cfg(target_os = "linux")]
mod membarrier {
    // linux/membarrier.h
    pub(super) const QUERY: libc::c_long = 0;
    pub(super) const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    pub(super) const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    pub(super) fn call(cmd: libc::c_long) -> libc::c_long {
        // SAFETY: membarrier takes plain integers and touches no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        }
    }
}

/// Whether this process may use the barrier (registered on first use).
fn barrier_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            let cmds = membarrier::call(membarrier::QUERY);
            cmds >= 0
                && cmds & membarrier::PRIVATE_EXPEDITED != 0
                && membarrier::call(membarrier::REGISTER_PRIVATE_EXPEDITED) == 0
        }
        #[cfg(not(target_os = "linux"))]
        false
    })
}

/// A full memory barrier on every running thread of the process.
fn barrier() {
    #[cfg(target_os = "linux")]
    if membarrier::call(membarrier::PRIVATE_EXPEDITED) == 0 {
        return;
    }
    // Not reached once registered (the call cannot fail then); should it,
    // a store buffer drains in far less than this.
    std::thread::sleep(std::time::Duration::from_millis(1));
}
