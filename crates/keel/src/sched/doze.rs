//! `Doze`: how a parked worker stops its periodic checks when the whole
//! runtime is idle, without losing the bound they keep while it is not.
//!
//! A parked worker that is not blocked in its reactor poll looks every
//! `REACTOR_CHECK_NS` (5 ms) whether the blocker role was left vacant
//! (see `worker`), and with a ring per worker each parked worker looks
//! as often at the rings of the workers that run. That bounds how long a
//! long poll can keep IO unwatched while workers sleep. It is needed only
//! while some worker is away from its reactor poll; an idle server paid it
//! anyway: some 200 wake-ups a second per sleeping worker, where an idle
//! tokio runtime has none.
//!
//! So a sleeper that has looked [`QUIET_CHECKS`] times in a row (100 ms)
//! and found nothing changed (no blocker left its poll meanwhile, and every
//! role it watches is held) *dozes*: it sleeps without a timeout (or until
//! its timer, if it watches one). A blocker that leaves its poll while
//! workers doze arms the *alarm*, a timer of the kernel's (a `timerfd`)
//! set [`ALARM_AFTER`] ahead, as far as the sleepers' own looks; when it
//! fires, the runtime's alarm thread wakes every dozer, which goes back to
//! its periodic looks. The leaving blocker does not wake anyone itself:
//! a wake-up there would cost its event a cross-CPU wake (an interrupt to
//! a halted CPU, measured at some 90 µs more on the first request after a
//! quiet spell), where arming a timer costs one system call and no wake.
//!
//! On a busy or lightly loaded server blockers leave far more often than
//! every 100 ms and nobody dozes; an idle one wakes no thread until
//! something happens. One worker alone never looks after anyone, and
//! where the kernel refuses the timer (or under Miri) nobody dozes.
//!
//! # Why no doze outlives a departure
//!
//! A dozer registers (`count`, a read-modify-write), issues a `SeqCst`
//! fence, then reads the departure count and dozes only if it has not
//! moved since its last look. A departing blocker leaves its role, bumps
//! the departure count (a read-modify-write), issues a `SeqCst` fence,
//! then reads `count`. In the single total order of the two fences
//! either the dozer's comes second, and its read sees the bump, so it
//! does not doze; or the departer's does, and its read sees the
//! registration, so it arms the alarm (unless it is armed already), and
//! the alarm's wake-up finds the dozer's flag: it takes `armed` back with
//! a read-modify-write, which reads the last departure's write of it, and
//! so follows every departure that left its dozers to it.
//! (Fences rather than `SeqCst` loads alone: they are what the C++ model
//! orders between two variables, and what loom models.) The wake-up is
//! a parker token, which survives until the dozer parks (see `park`).
//! The model in `loom_tests` checks it, the alarm firing at once.

use std::sync::atomic::{AtomicU64 as Counter, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

// Locks a `std` mutex, ignoring poison (the error text is a statistic,
// which the loom models leave out).
use crate::io::lock;
use crate::loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use crate::stats::DozeStats;

/// How long after a blocker leaves its poll the dozers are woken (5 ms,
/// the sleepers' own look interval: the bound on how long a long poll can
/// keep IO unwatched is the same with or without dozing).
#[cfg_attr(any(loom, miri), allow(dead_code))]
pub(crate) const ALARM_AFTER: Duration = Duration::from_millis(5);

/// Checks in a row that must find nothing changed before a sleeper dozes:
/// 20 of 5 ms, so a server idle for 100 ms stops waking.
pub(crate) const QUIET_CHECKS: u32 = 20;

/// Which workers doze, and how often a blocker left its poll (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct Doze {
    /// Blockers that left their reactor poll, ever.
    departures: AtomicU64,
    /// Workers whose flag in `dozing` is set.
    count: AtomicUsize,
    /// One per worker: set while it dozes (or is about to).
    dozing: Box<[AtomicBool]>,
    /// Whether the alarm is set and has not yet woken the dozers.
    armed: AtomicBool,
    /// Whether workers may doze: there is an alarm to wake them, and it
    /// has not failed.
    enabled: AtomicBool,
    /// The kernel's timer behind the alarm; `None` where nobody dozes.
    #[cfg(not(any(loom, miri)))]
    alarm: Option<sys::Alarm>,
    /// Times a worker began to doze (a statistic: not part of the
    /// protocol, so not a modelled atomic).
    dozes: Counter,
    /// Times the alarm fired and woke at least one dozer.
    alarms: Counter,
    /// Why dozing is off where the runtime would have it on.
    alarm_error: Mutex<Option<String>>,
}

impl Doze {
    /// Bookkeeping for `workers` workers, none dozing. Workers may doze
    /// only with two or more of them, and where the kernel gives a timer.
    pub(crate) fn new(workers: usize) -> Doze {
        #[cfg(not(any(loom, miri)))]
        let (alarm, alarm_error) = match (workers >= 2).then(sys::Alarm::new) {
            Some(Ok(alarm)) => (Some(alarm), None),
            Some(Err(error)) => (None, Some(refused("create", &error))),
            None => (None, None),
        };
        #[cfg(not(any(loom, miri)))]
        let enabled = alarm.is_some();
        #[cfg(any(loom, miri))]
        let (enabled, alarm_error) = (cfg!(loom) && workers >= 2, None);
        Doze {
            departures: AtomicU64::new(0),
            count: AtomicUsize::new(0),
            dozing: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            armed: AtomicBool::new(false),
            enabled: AtomicBool::new(enabled),
            #[cfg(not(any(loom, miri)))]
            alarm,
            dozes: Counter::new(0),
            alarms: Counter::new(0),
            alarm_error: Mutex::new(alarm_error),
        }
    }

    /// The figures of [`Stats::doze`](crate::stats::Stats::doze).
    pub(crate) fn stats(&self) -> DozeStats {
        DozeStats {
            enabled: self.enabled.load(SeqCst),
            dozes: self.dozes.load(Relaxed),
            alarms: self.alarms.load(Relaxed),
            alarm_error: lock(&self.alarm_error).clone(),
        }
    }

    /// Whether the runtime needs its alarm thread (see
    /// [`wait_for_alarm`](Self::wait_for_alarm)).
    #[cfg_attr(any(loom, miri), allow(dead_code))]
    pub(crate) fn has_alarm(&self) -> bool {
        #[cfg(not(any(loom, miri)))]
        return self.alarm.is_some();
        #[cfg(any(loom, miri))]
        false
    }

    /// How many times a blocker left its poll so far: a sleeper compares
    /// it across its checks ([`Quiet`]).
    pub(crate) fn departures(&self) -> u64 {
        self.departures.load(SeqCst)
    }

    /// Registers `worker` as dozing if workers may doze, no blocker left
    /// its poll since the count `seen`, and `still_quiet` (asked after the
    /// registration) holds. Returns whether it may doze; if so it must
    /// call [`wake_up`](Self::wake_up) once awake.
    pub(crate) fn try_doze(
        &self,
        worker: usize,
        seen: u64,
        still_quiet: impl FnOnce() -> bool,
    ) -> bool {
        if !self.enabled.load(SeqCst) {
            return false;
        }
        self.dozing[worker].store(true, SeqCst);
        self.count.fetch_add(1, SeqCst);
        // Orders the registration before the read of the departures (the
        // dozer's half of the protocol in the module docs).
        fence(SeqCst);
        // `enabled` again, after the fence: a failed alarm turns it off,
        // fences, then wakes the dozers it finds (see `disable`), so a
        // sleeper that registered too late for that scan sees it off here.
        if self.enabled.load(SeqCst) && self.departures.load(SeqCst) == seen && still_quiet() {
            self.dozes.fetch_add(1, Relaxed);
            return true;
        }
        self.wake_up(worker);
        false
    }

    /// `worker` is awake: it no longer dozes, whether or not the alarm
    /// has already taken it out.
    pub(crate) fn wake_up(&self, worker: usize) {
        if self.dozing[worker].swap(false, SeqCst) {
            self.count.fetch_sub(1, SeqCst);
        }
    }

    /// A blocker left its poll (after giving up its role): counts the
    /// departure and, if workers doze and the alarm is not set, sets it.
    /// If the kernel will not set the timer, nobody dozes from then on and
    /// the dozers are woken here, through `unpark`.
    pub(crate) fn departed(&self, unpark: impl FnMut(usize)) {
        if self.must_arm() {
            if let Err(error) = self.arm() {
                self.disable(refused("set", &error), unpark);
            }
        }
    }

    /// [`departed`](Self::departed)'s bookkeeping: whether the alarm must
    /// be set now.
    pub(crate) fn must_arm(&self) -> bool {
        self.departures.fetch_add(1, SeqCst);
        // Orders the departure before the read of the dozers (the
        // departer's half).
        fence(SeqCst);
        self.count.load(SeqCst) > 0 && !self.armed.swap(true, SeqCst)
    }

    /// Sets the alarm [`ALARM_AFTER`] ahead; fails where the kernel
    /// would not set it (under loom, where no time passes, the model fires
    /// it itself).
    fn arm(&self) -> std::io::Result<()> {
        #[cfg(not(any(loom, miri)))]
        if let Some(alarm) = &self.alarm {
            return alarm.set(ALARM_AFTER);
        }
        Ok(())
    }

    /// The alarm cannot be relied on (`why`): nobody dozes from now on,
    /// and those who do are woken through `unpark`. The fence pairs with
    /// the one in [`try_doze`](Self::try_doze): a sleeper either
    /// registered in time for the scan below, or reads `enabled` off after
    /// its registration.
    pub(crate) fn disable(&self, why: String, unpark: impl FnMut(usize)) {
        self.enabled.store(false, SeqCst);
        fence(SeqCst);
        self.wake_dozers(unpark);
        tracing::warn!("parked workers no longer doze: {why}; they look every 5 ms instead");
        *lock(&self.alarm_error) = Some(why);
    }

    /// The alarm fired: calls `unpark` for every dozing worker, each
    /// taken out of the dozers first; returns how many it woke.
    #[cfg_attr(miri, allow(dead_code))]
    pub(crate) fn wake_dozers(&self, mut unpark: impl FnMut(usize)) -> usize {
        // A swap, not a store: a departure that found the alarm set (and
        // so left its dozers to this scan) wrote `armed` last, and this
        // read of its write orders the dozers it saw before the scan.
        self.armed.swap(false, SeqCst);
        let mut woken = 0;
        for (worker, dozing) in self.dozing.iter().enumerate() {
            if dozing.load(SeqCst) && dozing.swap(false, SeqCst) {
                self.count.fetch_sub(1, SeqCst);
                unpark(worker);
                woken += 1;
            }
        }
        woken
    }

    /// The alarm thread's body: waits for the alarm and wakes the dozers
    /// through `unpark`, until `stopping` says the runtime stops (see
    /// [`stop`](Self::stop)). If the kernel's timer fails, nobody dozes
    /// from then on, and those who do are woken.
    #[cfg(not(any(loom, miri)))]
    pub(crate) fn wait_for_alarm(
        &self,
        stopping: impl Fn() -> bool,
        mut unpark: impl FnMut(usize),
    ) {
        let Some(alarm) = &self.alarm else {
            return;
        };
        loop {
            if let Err(error) = alarm.wait() {
                // Nobody is left to wait for the alarm.
                self.disable(refused("wait on", &error), &mut unpark);
                return;
            }
            if self.wake_dozers(&mut unpark) > 0 {
                self.alarms.fetch_add(1, Relaxed);
            }
            if stopping() {
                return;
            }
        }
    }

    /// Fires the alarm at once, so that the alarm thread sees the runtime
    /// stop.
    pub(crate) fn stop(&self) {
        #[cfg(not(any(loom, miri)))]
        if let Some(alarm) = &self.alarm {
            let _ = alarm.set(Duration::from_nanos(1));
        }
    }
}

/// What [`DozeStats::alarm_error`] says when the kernel refused to
/// `what` (create, set, wait on) the alarm's timer.
#[cfg_attr(any(loom, miri), allow(dead_code))]
fn refused(what: &str, error: &std::io::Error) -> String {
    format!("the kernel refused to {what} the alarm's timer (timerfd): {error}")
}

#[cfg(not(any(loom, miri)))]
mod sys {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    /// A one-shot `timerfd` on the monotonic clock.
    #[derive(Debug)]
    pub(super) struct Alarm(OwnedFd);

    impl Alarm {
        pub(super) fn new() -> io::Result<Alarm> {
            // SAFETY: no pointer is passed; the result is checked.
            let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` was just opened and is owned by nothing else.
            Ok(Alarm(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        /// An alarm the kernel refuses to set and that never fires: a
        /// descriptor that is not a timer (`/dev/null`), for the tests of
        /// the failure paths.
        #[cfg(test)]
        pub(super) fn broken() -> Alarm {
            Alarm(std::fs::File::open("/dev/null").expect("/dev/null").into())
        }

        /// Fires once, `after` from now (a zero `after` would disarm it:
        /// callers pass at least a nanosecond).
        pub(super) fn set(&self, after: Duration) -> io::Result<()> {
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: libc::time_t::try_from(after.as_secs()).unwrap_or(libc::time_t::MAX),
                    tv_nsec: after.subsec_nanos().into(),
                },
            };
            // SAFETY: `spec` is a valid itimerspec that lives across the
            // call; the old value is not asked for (null).
            let set = unsafe {
                libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
            if set < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }

        /// Blocks until the timer fires.
        pub(super) fn wait(&self) -> io::Result<()> {
            let mut expirations = [0u8; 8];
            loop {
                // SAFETY: reads at most 8 bytes into `expirations`, which
                // lives across the call.
                let read = unsafe {
                    libc::read(
                        self.0.as_raw_fd(),
                        expirations.as_mut_ptr().cast(),
                        expirations.len(),
                    )
                };
                if read == 8 {
                    return Ok(());
                }
                let error = io::Error::last_os_error();
                if read < 0 && error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(if read < 0 {
                    error
                } else {
                    io::Error::new(io::ErrorKind::UnexpectedEof, "a short read of the alarm")
                });
            }
        }
    }
}

/// A sleeper's count of checks in a row that found nothing changed.
#[derive(Debug)]
pub(crate) struct Quiet {
    departures: u64,
    checks: u32,
}

impl Quiet {
    /// Starts counting from the departures seen now.
    pub(crate) fn new(departures: u64) -> Quiet {
        Quiet {
            departures,
            checks: 0,
        }
    }

    /// A check found `departures` (and `held`: every role the sleeper
    /// watches had its blocker): one more quiet check if nothing moved
    /// since the last, else the count starts again.
    pub(crate) fn checked(&mut self, departures: u64, held: bool) {
        if departures == self.departures && held {
            self.checks = self.checks.saturating_add(1);
        } else {
            self.departures = departures;
            self.checks = 0;
        }
    }

    /// Whether enough quiet checks went by to doze.
    pub(crate) fn may_doze(&self) -> bool {
        self.checks >= QUIET_CHECKS
    }

    /// The departures the last check saw (for [`Doze::try_doze`]).
    pub(crate) fn seen(&self) -> u64 {
        self.departures
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_sleeper_may_doze_after_enough_quiet_checks_only() {
        let mut quiet = Quiet::new(7);
        for _ in 0..QUIET_CHECKS - 1 {
            quiet.checked(7, true);
        }
        assert!(!quiet.may_doze());
        quiet.checked(7, true);
        assert!(quiet.may_doze());
        // A departure starts the count again, from the new figure.
        quiet.checked(8, true);
        assert!(!quiet.may_doze());
        assert_eq!(quiet.seen(), 8);
        // So does a role found vacant.
        for _ in 0..QUIET_CHECKS {
            quiet.checked(8, true);
        }
        quiet.checked(8, false);
        assert!(!quiet.may_doze());
    }

    #[test]
    #[cfg_attr(miri, ignore = "nobody dozes under Miri, which has no timerfd")]
    fn a_departure_sets_the_alarm_once_and_the_alarm_wakes_every_dozer() {
        let doze = Doze::new(3);
        assert!(doze.try_doze(0, 0, || true));
        assert!(doze.try_doze(2, 0, || true));
        assert!(
            doze.must_arm(),
            "dozers: the first departure sets the alarm"
        );
        assert!(!doze.must_arm(), "set already: the next leaves it");
        let mut woken = Vec::new();
        doze.wake_dozers(|worker| woken.push(worker));
        assert_eq!(woken, [0, 2]);
        // Taken out by the alarm: their own wake-up changes nothing, and
        // with nobody dozing a departure sets nothing.
        doze.wake_up(0);
        doze.wake_up(2);
        assert_eq!(doze.count.load(SeqCst), 0);
        assert!(!doze.must_arm());
        woken.clear();
        doze.wake_dozers(|worker| woken.push(worker));
        assert!(woken.is_empty());
    }

    #[test]
    #[cfg_attr(miri, ignore = "nobody dozes under Miri, which has no timerfd")]
    fn no_doze_after_a_departure_or_when_not_quiet() {
        let doze = Doze::new(2);
        let seen = doze.departures();
        assert!(!doze.must_arm(), "nobody dozes");
        assert!(!doze.try_doze(0, seen, || true));
        assert!(!doze.try_doze(0, doze.departures(), || false));
        assert_eq!(doze.count.load(SeqCst), 0);
        assert!(!doze.dozing[0].load(SeqCst));
        // A dozer that wakes by itself leaves the count.
        assert!(doze.try_doze(1, doze.departures(), || true));
        doze.wake_up(1);
        assert_eq!(doze.count.load(SeqCst), 0);
    }

    /// A doze for two workers whose alarm the kernel refuses.
    #[cfg(not(miri))]
    fn with_a_broken_alarm() -> Doze {
        let mut doze = Doze::new(2);
        assert!(doze.has_alarm());
        doze.alarm = Some(sys::Alarm::broken());
        doze
    }

    #[test]
    #[cfg(not(miri))] // no alarm under Miri, which has no timerfd
    fn a_departure_whose_alarm_the_kernel_refuses_wakes_the_dozers_itself() {
        let doze = with_a_broken_alarm();
        assert!(doze.try_doze(1, doze.departures(), || true));
        let mut woken = Vec::new();
        doze.departed(|worker| woken.push(worker));
        assert_eq!(woken, [1], "nobody else would wake the dozer");
        assert_eq!(doze.count.load(SeqCst), 0);
        // Nobody dozes from now on, and the stats say why.
        assert!(!doze.try_doze(0, doze.departures(), || true));
        assert!(!doze.dozing[0].load(SeqCst));
        let stats = doze.stats();
        assert!(!stats.enabled);
        assert_eq!((stats.dozes, stats.alarms), (1, 0));
        let error = stats.alarm_error.expect("the refusal is reported");
        assert!(error.contains("refused to set"), "{error}");
    }

    #[test]
    #[cfg(not(miri))] // no alarm under Miri, which has no timerfd
    fn an_alarm_that_fails_to_fire_wakes_the_dozers_and_ends_dozing() {
        let doze = with_a_broken_alarm();
        assert!(doze.try_doze(0, doze.departures(), || true));
        let mut woken = Vec::new();
        // A read of /dev/null returns at once with nothing: a failed wait.
        doze.wait_for_alarm(|| false, |worker| woken.push(worker));
        assert_eq!(woken, [0]);
        assert!(!doze.try_doze(1, doze.departures(), || true));
        let stats = doze.stats();
        assert!(!stats.enabled && stats.alarms == 0);
        let error = stats.alarm_error.expect("the failure is reported");
        assert!(error.contains("refused to wait on"), "{error}");
    }

    #[test]
    fn one_worker_never_dozes() {
        let doze = Doze::new(1);
        assert!(!doze.has_alarm());
        assert!(!doze.try_doze(0, doze.departures(), || true));
        // Off by design, not for an error.
        let stats = doze.stats();
        assert!(!stats.enabled && stats.alarm_error.is_none());
    }

    /// The kernel's timer wakes the dozer some time after the departure,
    /// and the alarm thread stops when told.
    #[cfg(not(miri))]
    #[test]
    fn the_alarm_thread_wakes_a_dozer_after_a_departure() {
        use std::sync::atomic::AtomicBool as StdBool;
        use std::sync::mpsc;

        let doze = std::sync::Arc::new(Doze::new(2));
        assert!(doze.has_alarm());
        let stopping = std::sync::Arc::new(StdBool::new(false));
        let (woken_tx, woken_rx) = mpsc::channel();
        let thread = {
            let (doze, stopping) = (doze.clone(), stopping.clone());
            std::thread::spawn(move || {
                doze.wait_for_alarm(
                    || stopping.load(SeqCst),
                    |worker| woken_tx.send(worker).unwrap(),
                );
            })
        };
        assert!(doze.try_doze(1, doze.departures(), || true));
        let departed = std::time::Instant::now();
        doze.departed(|worker| panic!("the departer woke {worker} itself"));
        let woken = woken_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(woken, 1);
        // Not before the alarm's delay: the departer woke nobody itself.
        assert!(departed.elapsed() >= ALARM_AFTER);
        assert!(!doze.dozing[1].load(SeqCst));
        stopping.store(true, SeqCst);
        doze.stop();
        thread.join().unwrap();
        // The firing that stopped the thread woke nobody: not counted.
        let stats = doze.stats();
        assert_eq!((stats.dozes, stats.alarms), (1, 1));
        assert!(stats.enabled && stats.alarm_error.is_none());
    }
}
