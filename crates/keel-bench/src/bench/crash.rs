//! `keel-bench bench s5 --crash N`: nothing acknowledged is ever lost.
//!
//! The keel log node runs under the S5 clients and is killed with SIGKILL
//! at a random moment, N times, each time restarted on the same log. A
//! kill at a random moment lands anywhere: between a write and its sync,
//! halfway through a batch, while a segment rolls over. Each client
//! reports exactly what it was promised (the last sequence number
//! acknowledged and its LSN, and whether another record was in flight),
//! and the records say who wrote them ([`crate::load::s5::record`]), so
//! at the end the log, opened as a restart would open it, must hold for
//! every client the records `1..=acked` in order and with intact bytes,
//! the acknowledged LSN must hold that very record, and nothing else may
//! be there but at most the one record that was in flight.
//!
//! The kill moments come from a seeded generator; the seed is in the
//! report so a failing run can be repeated.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{json, Value};

use super::child::Child;
use super::outcome::{Goal, Outcome, Pairs, RunFigures, Verdict};
use super::progress::PhaseBar;
use super::s5::node_args;
use crate::error::Error;
use crate::load::s5::{parse_record, ClientResult, LogLoadSummary};
use crate::serve::control::AddrLine;
use crate::serve::s5::LogMode;
use crate::serve::RuntimeKind;

/// What the check measures, for the table.
const TITLE: &str = "nothing acknowledged is lost after kill -9";

/// Client ids of kill `k` start at `k * ID_STRIDE`, so every run of
/// clients against the one log is told apart.
const ID_STRIDE: u32 = 1000;

/// The setup of a crash check.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// The `keel` executable.
    pub exe: PathBuf,
    /// How many times the node is killed.
    pub kills: u32,
    /// Worker threads of the node.
    pub workers: u64,
    /// Closed-loop log clients.
    pub clients: u32,
    /// Bytes per record.
    pub record: u64,
    /// Where the log lives (emptied first).
    pub data_dir: PathBuf,
    /// Shorter runs between kills.
    pub quick: bool,
}

/// What happened around one kill.
#[derive(Debug, Clone, Serialize)]
struct Kill {
    /// Kill number, from 1.
    kill: u32,
    /// What the node reported when it opened the log before this kill
    /// (what recovery found after the previous one).
    opened: Value,
    /// Milliseconds between starting the clients and the kill.
    after_ms: u64,
    /// Records acknowledged to the clients before the kill.
    acked: u64,
    /// Clients that had sent a record and not yet been answered.
    in_flight: u32,
    /// Of those unanswered records, how many the log held after restart
    /// (written before the kill, never acknowledged: allowed either way).
    in_log_unanswered: u64,
    /// Per client, what it was promised.
    clients: Vec<ClientResult>,
}

/// What the log held at the end, against what the clients were promised.
#[derive(Debug, Clone, Default, Serialize)]
struct Audit {
    /// Records in the log.
    records: u64,
    /// Records whose bytes are not what any client sent.
    corrupt: u64,
    /// Records out of sequence for their client (a gap or a repeat).
    out_of_order: u64,
    /// Acknowledged records missing from the log.
    lost: u64,
    /// Acknowledged LSNs that hold some other record.
    lsn_mismatch: u64,
    /// Records beyond what a client was promised or had in flight.
    unexpected: u64,
}

/// A small xorshift generator: enough to spread kill moments, seeded so a
/// run can be repeated.
struct Rng(u64);

impl Rng {
    /// The next number in `lo..hi` (`lo` if the range is empty).
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + self.0 % hi.saturating_sub(lo).max(1)
    }
}

/// Runs the crash check and judges it.
pub fn run(config: &CrashConfig) -> Result<Outcome, Error> {
    let dir = config.data_dir.join("crash");
    let _ = std::fs::remove_dir_all(&dir);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let mut rng = Rng(seed);
    let (lo_ms, hi_ms) = if config.quick {
        (100, 400)
    } else {
        (300, 1500)
    };
    let mut kills = Vec::new();
    for kill in 1..=config.kills {
        let after = Duration::from_millis(rng.between(lo_ms, hi_ms));
        kills.push(one_kill(config, &dir, kill, after)?);
    }
    let (opened, audit) = audit(&dir, &mut kills)?;
    let _ = std::fs::remove_dir_all(&config.data_dir);

    let acked: u64 = kills.iter().map(|k| k.acked).sum();
    let in_flight: Vec<u32> = kills.iter().map(|k| k.in_flight).collect();
    let metrics = Pairs(vec![
        ("kills", f64::from(config.kills)),
        ("acked", acked as f64),
        ("records_in_log", audit.records as f64),
        ("lost", audit.lost as f64),
        ("corrupt", audit.corrupt as f64),
        ("out_of_order", audit.out_of_order as f64),
        ("lsn_mismatch", audit.lsn_mismatch as f64),
        ("unexpected", audit.unexpected as f64),
        ("in_flight_total", f64::from(in_flight.iter().sum::<u32>())),
        (
            "in_flight_max",
            f64::from(in_flight.iter().copied().max().unwrap_or(0)),
        ),
        (
            "in_log_unanswered",
            kills.iter().map(|k| k.in_log_unanswered).sum::<u64>() as f64,
        ),
    ]);
    let damaged =
        (audit.corrupt + audit.out_of_order + audit.lsn_mismatch + audit.unexpected) as f64;
    let verdicts = vec![
        Verdict::new(
            "acked records lost",
            "keel",
            Some(audit.lost as f64),
            Some(Goal::AtMost(0.0)),
        ),
        Verdict::new(
            "records damaged, misplaced or unexpected",
            "keel",
            Some(damaged),
            Some(Goal::AtMost(0.0)),
        ),
    ];
    let mut problems = Vec::new();
    if acked == 0 {
        problems.push("no record was acknowledged before any kill".to_string());
    }
    let list = |values: Vec<String>| values.join(" ");
    let notes = vec![
        format!(
            "appends in flight (sent, not answered) at each kill: {}",
            list(in_flight.iter().map(u32::to_string).collect())
        ),
        format!(
            "of those, in the log after restart: {}",
            list(
                kills
                    .iter()
                    .map(|k| k.in_log_unanswered.to_string())
                    .collect()
            )
        ),
    ];
    Ok(Outcome {
        noise: Vec::new(),
        id: "s5",
        title: TITLE,
        sizes: Pairs(vec![
            ("kills", json!(config.kills)),
            ("clients", json!(config.clients)),
            ("record_bytes", json!(config.record)),
            ("workers", json!(config.workers)),
            ("kill_after_ms", json!([lo_ms, hi_ms])),
            ("seed", json!(seed)),
        ]),
        runs: vec![RunFigures {
            runtime: "keel".into(),
            mode: "crash".into(),
            metrics,
        }],
        verdicts,
        rounds: json!({"kills": kills, "final_open": opened, "audit": audit}),
        problems,
        notes,
        charts: Vec::new(),
        chart_files: Vec::new(),
    })
}

/// Starts the node on `dir`, runs the clients, kills the node after
/// `after`, and collects what the clients were promised.
fn one_kill(config: &CrashConfig, dir: &Path, kill: u32, after: Duration) -> Result<Kill, Error> {
    let label = format!("s5 crash {kill}/{}", config.kills);
    let bar = PhaseBar::new(&label, after + Duration::from_millis(500));
    let result = kill_body(config, dir, kill, after, &bar);
    match result {
        Ok(record) => {
            bar.finish(&format!(
                "{label:<28} killed after {:>5} ms  acked {:>7}  in flight {}",
                record.after_ms, record.acked, record.in_flight
            ));
            Ok(record)
        }
        Err(error) => {
            bar.abandon();
            Err(error.context(label))
        }
    }
}

/// The body of [`one_kill`].
fn kill_body(
    config: &CrashConfig,
    dir: &Path,
    kill: u32,
    after: Duration,
    bar: &PhaseBar,
) -> Result<Kill, Error> {
    bar.step("starting the node");
    let mut node = Child::spawn(
        "keel serve s5 (keel group)",
        &config.exe,
        &node_args(RuntimeKind::Keel, LogMode::Group, config.workers, dir),
    )?;
    let addrs: AddrLine = node.recv_json(Duration::from_secs(30), "its address", || bar.tick())?;
    let log_addr = addrs
        .log_addr
        .ok_or_else(|| Error::new("the node did not say where its log service is"))?;
    bar.step("loading");
    let mut clients = Child::spawn(
        "keel load s5",
        &config.exe,
        &[
            "load".into(),
            "s5".into(),
            "--addr".into(),
            log_addr.to_string(),
            "--clients".into(),
            config.clients.to_string(),
            "--first-id".into(),
            (kill * ID_STRIDE).to_string(),
            "--record".into(),
            config.record.to_string(),
            "--duration-s".into(),
            "60".into(),
            "--warmup-ms".into(),
            "0".into(),
        ],
    )?;
    let started = Instant::now();
    while started.elapsed() < after {
        std::thread::sleep(Duration::from_millis(10));
        bar.tick();
    }
    bar.step("killing");
    node.kill();
    let after_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let summary: LogLoadSummary =
        clients.recv_json(Duration::from_secs(30), "its results", || bar.tick())?;
    let _ = clients.finish(Duration::from_secs(5))?;
    Ok(Kill {
        kill,
        opened: addrs.startup,
        after_ms,
        acked: summary.clients.iter().map(|c| c.acked_seq).sum(),
        in_flight: summary.clients.iter().filter(|c| c.in_flight).count() as u32,
        in_log_unanswered: 0,
        clients: summary.clients,
    })
}

/// Opens the log as a restart would and checks it against every promise.
fn audit(dir: &Path, kills: &mut [Kill]) -> Result<(Value, Audit), Error> {
    let log = keel::wal::Log::open(dir, keel::wal::Options::default())
        .map_err(|e| Error::new(format!("cannot open the log in {}: {e}", dir.display())))?;
    let opened = crate::serve::s5_keel::recovery_json(log.recovery());
    let mut found = Found::default();
    let records = log
        .iter()
        .map_err(|e| Error::new(format!("cannot read the log: {e}")))?;
    for record in records {
        let record = record.map_err(|e| Error::new(format!("reading the log: {e}")))?;
        found.add(record.lsn.get(), &record.data);
    }
    Ok((opened, found.judge(kills)))
}

/// What the log holds, per client.
#[derive(Debug, Default)]
struct Found {
    /// Records read.
    records: u64,
    /// Records that are not what any client sent.
    corrupt: u64,
    /// Records out of sequence for their client.
    out_of_order: u64,
    /// Per client, the next sequence number expected: `1..next` are in
    /// the log, in order.
    next: HashMap<u32, u64>,
    /// The LSN of each (client, sequence number) seen.
    lsns: HashMap<(u32, u64), u64>,
}

impl Found {
    /// Takes in the record at `lsn`.
    fn add(&mut self, lsn: u64, data: &[u8]) {
        self.records += 1;
        let Some((client, seq)) = parse_record(data) else {
            self.corrupt += 1;
            return;
        };
        let expected = self.next.entry(client).or_insert(1);
        if seq == *expected {
            *expected += 1;
        } else {
            self.out_of_order += 1;
        }
        self.lsns.insert((client, seq), lsn);
    }

    /// Checks the log against what every client was promised, and notes
    /// per kill how many unanswered records reached the log anyway.
    fn judge(&self, kills: &mut [Kill]) -> Audit {
        let mut audit = Audit {
            records: self.records,
            corrupt: self.corrupt,
            out_of_order: self.out_of_order,
            ..Audit::default()
        };
        for kill in kills {
            kill.in_log_unanswered = 0;
            for client in &kill.clients {
                let present = self.next.get(&client.id).map_or(0, |n| n - 1);
                audit.lost += client.acked_seq.saturating_sub(present);
                let allowed = client.acked_seq + u64::from(client.in_flight);
                audit.unexpected += present.saturating_sub(allowed);
                kill.in_log_unanswered += present.min(allowed).saturating_sub(client.acked_seq);
                if client.acked_seq > 0
                    && self.lsns.get(&(client.id, client.acked_seq)) != Some(&client.acked_lsn)
                {
                    audit.lsn_mismatch += 1;
                }
            }
        }
        audit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator stays in range and moves.
    #[test]
    fn rng_in_range() {
        let mut rng = Rng(12345);
        let draws: Vec<u64> = (0..100).map(|_| rng.between(300, 1500)).collect();
        assert!(draws.iter().all(|d| (300..1500).contains(d)));
        assert!(draws.iter().any(|&d| d != draws[0]));
        assert_eq!(Rng(7).between(5, 5), 5);
    }

    /// A kill whose clients were promised `acked` (id, last acknowledged
    /// sequence number, its LSN, in flight).
    fn kill(clients: &[(u32, u64, u64, bool)]) -> Kill {
        Kill {
            kill: 1,
            opened: Value::Null,
            after_ms: 0,
            acked: clients.iter().map(|c| c.1).sum(),
            in_flight: clients.iter().filter(|c| c.3).count() as u32,
            in_log_unanswered: 0,
            clients: clients
                .iter()
                .map(|&(id, acked_seq, acked_lsn, in_flight)| ClientResult {
                    id,
                    acked_seq,
                    acked_lsn,
                    in_flight,
                    error: None,
                })
                .collect(),
        }
    }

    /// A log holding client 1's records 1..=3 and client 2's 1..=2,
    /// interleaved, with LSNs 1..=5.
    fn found() -> Found {
        let mut found = Found::default();
        for (lsn, (client, seq)) in [(1, 1), (2, 1), (1, 2), (2, 2), (1, 3)].iter().enumerate() {
            found.add(lsn as u64 + 1, &crate::load::s5::record(*client, *seq, 64));
        }
        found
    }

    /// Every promise kept: nothing lost, and an unanswered record that
    /// reached the log is counted, not blamed.
    #[test]
    fn a_log_that_keeps_its_promises_passes() {
        let mut kills = [kill(&[(1, 2, 3, true), (2, 2, 4, true)])];
        let audit = found().judge(&mut kills);
        assert_eq!(audit.records, 5);
        assert_eq!(
            (
                audit.lost,
                audit.corrupt,
                audit.out_of_order,
                audit.lsn_mismatch,
                audit.unexpected
            ),
            (0, 0, 0, 0, 0),
            "{audit:?}"
        );
        assert_eq!(kills[0].in_log_unanswered, 1, "client 1's record 3");
    }

    /// A missing acknowledged record, a wrong LSN, a record nobody had in
    /// flight, a damaged record and a gap are each caught.
    #[test]
    fn broken_promises_are_caught() {
        let mut kills = [kill(&[(1, 4, 9, false)])];
        let audit = found().judge(&mut kills);
        assert_eq!(audit.lost, 1, "record 4 of client 1 is missing");
        assert_eq!(audit.lsn_mismatch, 1, "nor is it at LSN 9");

        let mut kills = [kill(&[(1, 3, 4, false), (2, 1, 2, false)])];
        let audit = found().judge(&mut kills);
        assert_eq!(audit.lsn_mismatch, 1, "client 1's record 3 is at LSN 5");
        assert_eq!(audit.unexpected, 1, "client 2's record 2 was never sent");

        let mut found = found();
        let mut damaged = crate::load::s5::record(2, 3, 64);
        damaged[40] ^= 1;
        found.add(6, &damaged);
        found.add(7, &crate::load::s5::record(2, 5, 64));
        let audit = found.judge(&mut []);
        assert_eq!((audit.corrupt, audit.out_of_order), (1, 1), "{audit:?}");
    }
}
