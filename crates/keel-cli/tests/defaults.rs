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
    // The worker count a default runtime chooses here, and why.
    let sizing = keel::Runtime::builder().build().unwrap().stats();
    let workers = format!(
        "workers: {}; {}\n",
        sizing.workers.len(),
        sizing.sizing.workers_reason
    );
    assert!(out.contains(&workers), "{out}");
    assert!(out.contains("spin: 0ns; the default: no spin"), "{out}");
    // The default backend is epoll unless KEEL_IO_BACKEND (inherited by
    // the program) says otherwise: the program reports what a runtime
    // built here reports.
    let io = keel::Runtime::builder()
        .workers(1)
        .build()
        .unwrap()
        .stats()
        .io;
    let backend = format!("io backend: {} (asked {}", io.driver, io.requested);
    assert!(out.contains(&backend), "{out}");
    if std::env::var_os(keel::io::IoBackend::ENV).is_none() {
        assert!(out.contains("io backend: epoll (asked epoll)\n"), "{out}");
    }
    let ring = out
        .lines()
        .find_map(|line| line.strip_prefix("io_uring: "))
        .unwrap_or_else(|| panic!("no io_uring line: {out}"));
    assert_eq!(ring, keel::io::probe_io_uring().to_string());
}

/// Output into a pipe nobody reads (`keel --defaults | head -0`) ends the
/// program by `SIGPIPE`, as it ends other Unix tools, not with a panic.
#[test]
fn a_closed_pipe_ends_the_program_quietly() {
    use std::os::unix::process::ExitStatusExt;

    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg("--defaults")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{stderr}");
}
