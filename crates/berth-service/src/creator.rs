//! Who is making a session, and whether that process is gone.
//!
//! A create writes a `creating` record before it makes the log, and the final record
//! after. A process killed in between leaves the `creating` record, which hides the id;
//! the sweeper removes it an hour on (`ABANDONED_CREATE_MS`: it cannot tell a create
//! under way from one abandoned). So the record names its creator (`CreatorMark`), and a
//! create of the same id takes the record over at once when the kernel says that
//! process is gone: same boot of the same host, same PID namespace, and no process with
//! that pid and start time (or only its zombie). Anything it cannot judge — another
//! host (PostgreSQL catalogs are shared), another namespace, no `/proc` — stays for
//! the sweeper.

use berth_catalog::CreatorMark;
use std::sync::Mutex;

/// This process's mark; `None` where the kernel does not say (no `/proc`). Computed
/// once per process — a forked child computes its own.
pub fn this_process() -> Option<CreatorMark> {
    static MARK: Mutex<Option<(u32, Option<CreatorMark>)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut cached = MARK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match &*cached {
        Some((owner, mark)) if *owner == pid => mark.clone(),
        _ => {
            let mark = read_mark(pid);
            *cached = Some((pid, mark.clone()));
            mark
        }
    }
}

fn read_mark(pid: u32) -> Option<CreatorMark> {
    let (_, started) = process_state(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(CreatorMark { boot: boot()?, pid_namespace: pid_namespace()?, pid, started })
}

/// True only when `mark` names a process of this host's boot and this PID namespace
/// that no longer runs (no such pid, another process under it, or its zombie).
pub(crate) fn is_gone(mark: &CreatorMark) -> bool {
    let Some(here) = this_process() else { return false };
    if mark.boot != here.boot || mark.pid_namespace != here.pid_namespace {
        return false;
    }
    if mark.pid == here.pid {
        return mark.started != here.started;
    }
    match std::fs::read_to_string(format!("/proc/{}/stat", mark.pid)) {
        Err(error) => error.kind() == std::io::ErrorKind::NotFound,
        Ok(stat) => match process_state(&stat) {
            Some((state, started)) => started != mark.started || matches!(state, 'Z' | 'X'),
            None => false,
        },
    }
}

/// The state letter and start time of a `/proc/PID/stat` line. The command name (field
/// 2) is in parentheses and may hold spaces and parentheses: fields are counted from
/// the last `)`.
fn process_state(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 is the state; the start time is field 22.
    let started = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, started))
}

fn boot() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(boot.trim().to_owned()).filter(|boot| !boot.is_empty())
}

fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid").ok()?.to_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_from_the_last_parenthesis() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(process_state(stat), Some(('S', 987654)));
        assert_eq!(process_state("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_running_and_a_reaped_child_is_gone() {
        let here = this_process().expect("Linux names its processes");
        assert_eq!(here.pid, std::process::id());
        assert!(!is_gone(&here));
        assert!(is_gone(&CreatorMark { started: here.started + 1, ..here.clone() }), "another process under our pid");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let started = process_state(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap()).unwrap().1;
        let child_mark = CreatorMark { pid, started, ..here.clone() };
        child.wait().unwrap();
        assert!(is_gone(&child_mark));
        assert!(!is_gone(&CreatorMark { boot: "another-boot".into(), ..child_mark.clone() }));
        assert!(!is_gone(&CreatorMark { pid_namespace: "pid:[1]".into(), ..child_mark }));
    }
}
