//! `keel --defaults` run as a program: the runtime's defaults, the IO
//! backend, and whether io_uring can be used here, as the library's probe
//! finds it.

mod support;

use std::time::Duration;

use support::keel;

#[test]
fn defaults_name_the_classes_the_backend_and_the_rings_support() {
    let run = keel(&["--defaults"], Duration::from_secs(60));
    assert!(run.status.success(), "{}", run.stderr);
    let out = &run.stdout;
    for class in ["urgent", "normal", "bulk"] {
        assert!(out.contains(&format!("class {class}: ")), "{out}");
    }
    assert!(out.contains("io backend: epoll\n"), "{out}");
    let ring = out
        .lines()
        .find_map(|line| line.strip_prefix("io_uring: "))
        .unwrap_or_else(|| panic!("no io_uring line: {out}"));
    assert_eq!(ring, keel::io::probe_io_uring().to_string());
}
