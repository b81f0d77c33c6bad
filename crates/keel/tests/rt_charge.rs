//! A class is charged for the time its polls held a worker on a core, not
//! for the time the kernel gave that core to another thread (see
//! `Builder::charge_on_cpu`).
//!
//! One worker and a competing thread are pinned to the same CPU, so the
//! kernel preempts the worker about half the time. Each poll of the class
//! computes for 1 ms of its thread's CPU time, however much wall time that
//! takes. With the meter the class's charge follows that CPU time and is
//! well under the polls' wall time; with it off (the control, same load)
//! the charge is the wall time. The margins are wide: the split between
//! the two threads is the kernel's, and only its order matters here.
//! This file holds only these tests, and they take turns (the lock below),
//! so nothing else of the test's competes for the CPU.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel::{Class, Runtime};

const POLLS: u32 = 200;
const CPU_PER_POLL: Duration = Duration::from_millis(1);

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and the call only
    // reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0
        );
    }
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs the contended load and returns the class's (busy, charged) time
/// and the worker's preempted time, with the meter on or off.
fn contended(charge_on_cpu: bool) -> (Duration, Duration, Option<Duration>) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = Runtime::builder()
        .workers(1)
        .charge_on_cpu(charge_on_cpu)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // The worker pins itself first, then the competitor joins it.
    rt.block_on(rt.spawn_in(Class::BULK, async { pin_to(0) }))
        .unwrap();
    let competitor = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin_to(0);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let work = rt.spawn_in(Class::BULK, async {
        for _ in 0..POLLS {
            let until = thread_cpu() + CPU_PER_POLL;
            while thread_cpu() < until {
                std::hint::spin_loop();
            }
            keel::yield_now().await;
        }
    });
    rt.block_on(work).unwrap();
    stop.store(true, Ordering::Relaxed);
    competitor.join().unwrap();
    // Charges reach the shared clock at the end of each 100 µs window;
    // wait for the worker to park, which flushes the last one.
    std::thread::sleep(Duration::from_millis(50));
    let stats = rt.stats();
    let bulk = &stats.classes[Class::BULK.index()];
    eprintln!(
        "charge_on_cpu {charge_on_cpu}: busy {:?} charged {:?} preempted {:?}",
        bulk.busy, bulk.charged, stats.workers[0].preempted_in_polls
    );
    (bulk.busy, bulk.charged, stats.workers[0].preempted_in_polls)
}

#[test]
fn a_class_is_not_charged_for_time_a_competing_thread_held_the_core() {
    let cpu = CPU_PER_POLL * POLLS;
    let (busy, charged, preempted) = contended(true);
    let preempted = preempted.expect("the kernel logs the worker's switches on this machine");
    // The polls took about twice their CPU time; the charge leaves out
    // what the meter saw as preempted, and stays near the CPU time.
    assert!(
        charged.as_secs_f64() < 0.8 * busy.as_secs_f64(),
        "charged {charged:?} of {busy:?} busy (preempted {preempted:?})"
    );
    assert!(
        preempted > busy / 5,
        "preempted {preempted:?} of {busy:?} busy"
    );
    assert!(
        charged >= cpu.mul_f64(0.9) && charged <= cpu.mul_f64(1.5),
        "charged {charged:?} for {cpu:?} of CPU time (busy {busy:?})"
    );
}

#[test]
fn with_the_meter_off_a_class_is_charged_its_wall_time() {
    let (busy, charged, preempted) = contended(false);
    assert_eq!(preempted, None);
    // The same load: the polls took about twice their CPU time, and all of
    // it is charged (up to the last unflushed window).
    let gap = busy.abs_diff(charged);
    assert!(
        gap < Duration::from_millis(2),
        "charged {charged:?}, busy {busy:?}"
    );
}
