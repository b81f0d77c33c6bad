//! The admin endpoint's request handling on any bytes, in memory: the
//! first byte sets the size of the reads, the rest is what one client
//! sends on one connection. The answers must pass the checks of
//! `tests/support/fuzz_admin.rs`; a panic anywhere, or an allocation past
//! the run's malloc limit, is a crash.

#![no_main]

#[path = "../../tests/support/fuzz_admin.rs"]
mod fuzz_admin;

use keel::admin::fuzzing::{exchange, MAX_OUTPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&read_size, input)) = data.split_first() else {
        return;
    };
    let output = exchange(input, usize::from(read_size) + 1);
    let cut = output.len() >= MAX_OUTPUT;
    if let Err(error) = fuzz_admin::check_exchange(input, &output, cut) {
        panic!(
            "{error}\ninput: {:?}\noutput: {:?}",
            String::from_utf8_lossy(input),
            String::from_utf8_lossy(&output[..output.len().min(2000)])
        );
    }
});
