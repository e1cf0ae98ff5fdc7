//! A linearizability checker for recorded histories of one session (reliability §6 test
//! 39, §5.3): concurrent clients' operations with their invocation and return times are
//! checked against a sequential model of a session — its event log, its idempotency
//! keys and its (serial) run attachment.
//!
//! The search is Wing & Gong's, with Lowe's memoization of (linearized set, model state):
//! repeatedly pick, among the operations not yet linearized, one that no pending
//! operation's return precedes, apply it to the model if its recorded outcome is one the
//! model allows there, and backtrack on a dead end. An operation whose outcome is unknown
//! (the request was cut by a kill, a timeout, a dropped connection) never returns: it may
//! take effect at any point after its invocation, or never.
//!
//! Pure and synchronous: the recording is the caller's business (times are any
//! monotonic nanoseconds), so the checker can be tested on hand-written histories.
//! Several sessions are several histories, each checked on its own (a session is its own
//! object: linearizability is local).
//!
//! *Rejected: stateright's `LinearizabilityTester`.* It would fit the model (its
//! `SequentialSpec::is_valid_step` admits a tail's any-prefix answer), but its search
//! enumerates interleavings without memoization, cloning the remaining history at
//! every step, so a few hundred operations with four in flight (and every `busy` or
//! read a free choice) is exponential; an in-flight operation is only tried after all
//! of its thread's completed ones, so each unknown outcome needs a thread of its own;
//! and it comes inside a model checker with its own dependencies. The search here is
//! the same idea in about a hundred lines, with the memo that makes it finish in
//! milliseconds on the recorded histories.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// Identifies one event across the history: what the workload wrote into its data, so a
/// read's events can be told apart and matched to the append that wrote them.
pub type Label = u64;

/// One operation on the session, as invoked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Append a batch (never empty) at `expected_seq` (or at the end) with an optional
    /// idempotency key, as the attached `run` (or, with `None`, as a service principal).
    Append { events: Vec<Label>, expected_seq: Option<u64>, key: Option<String>, run: Option<String> },
    /// One forward read of at most `limit` events from `from` (one request, one page).
    Read { from: u64, limit: u64 },
    /// A live tail from `from`, cut by the client after some events: what it received is
    /// a prefix of the log from `from`.
    Tail { from: u64 },
    /// Attach a run to the serial session (`on_busy = reject`).
    Attach { run: String },
    /// Detach a run.
    Detach { run: String },
}

/// What an operation answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The batch is at `[first_seq, …)`; `next_seq` is what the server answered (the
    /// batch's end, or for a keyless content-rule retry the log's end).
    Appended {
        first_seq: u64,
        next_seq: u64,
        duplicate: bool,
    },
    /// `expected_seq` did not match; `next_seq` is the log's end the server reported.
    SeqConflict {
        next_seq: u64,
    },
    /// The key is stored with other content, at `first_seq`.
    KeyReused {
        first_seq: u64,
    },
    /// Refused without effect: an append whose writer lease another server holds, or an
    /// attach while another run is attached.
    Busy,
    /// The events a read or a tail returned, in order.
    Events(Vec<Label>),
    Attached,
    /// An attach of a run id that is attached already.
    RunExists,
    Detached,
    RunNotAttached,
}

/// One operation of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub client: usize,
    pub invoked_ns: u64,
    /// `None`: the outcome is unknown (then `outcome` is `None` too).
    pub returned_ns: Option<u64>,
    pub operation: Operation,
    pub outcome: Option<Outcome>,
}

/// A history that is not well formed (the checker's input is refused, not judged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryError {
    /// Returned before it was invoked.
    ReturnBeforeInvoke { entry: usize },
    /// A return time without an outcome, or an outcome without a return time.
    OutcomeWithoutReturn { entry: usize },
    /// The outcome cannot be an answer to the operation (e.g. events for an append).
    OutcomeDoesNotFit { entry: usize },
    /// An append of no events (the server stores nothing and uses no key).
    EmptyAppend { entry: usize },
    /// A client's known operations overlap in time: a client does one thing at a time.
    ClientOverlaps { client: usize, entry: usize },
    /// More than `ENTRIES_MAX` operations.
    TooLong { entries: usize },
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::ReturnBeforeInvoke { entry } => write!(f, "entry {entry} returned before it was invoked"),
            HistoryError::OutcomeWithoutReturn { entry } => {
                write!(f, "entry {entry} has a return time without an outcome or the reverse")
            }
            HistoryError::OutcomeDoesNotFit { entry } => {
                write!(f, "entry {entry}'s outcome does not fit its operation")
            }
            HistoryError::EmptyAppend { entry } => write!(f, "entry {entry} appends no events"),
            HistoryError::ClientOverlaps { client, entry } => {
                write!(f, "client {client}'s entry {entry} starts before its previous one returned")
            }
            HistoryError::TooLong { entries } => write!(f, "{entries} entries (at most {ENTRIES_MAX})"),
        }
    }
}

impl std::error::Error for HistoryError {}

/// The longest history the checker takes: the search is exponential in the worst case,
/// and histories are meant to be bounded (a few clients × tens of operations).
pub const ENTRIES_MAX: usize = 4_096;

/// The default bound on the (linearized set, state) pairs the search visits.
pub const STATES_MAX_DEFAULT: usize = 2_000_000;

/// A well-formed history of one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    entries: Vec<Entry>,
}

impl History {
    /// Checks that `entries` are well formed. Unknown reads and tails are kept (they
    /// constrain nothing and change nothing).
    pub fn new(entries: Vec<Entry>) -> Result<History, HistoryError> {
        if entries.len() > ENTRIES_MAX {
            return Err(HistoryError::TooLong { entries: entries.len() });
        }
        let mut last_return_by_client: BTreeMap<usize, u64> = BTreeMap::new();
        let mut by_invocation: Vec<usize> = (0..entries.len()).collect();
        by_invocation.sort_by_key(|&index| (entries[index].invoked_ns, index));
        for &index in &by_invocation {
            let entry = &entries[index];
            if entry.returned_ns.is_some() != entry.outcome.is_some() {
                return Err(HistoryError::OutcomeWithoutReturn { entry: index });
            }
            if entry.returned_ns.is_some_and(|returned| returned < entry.invoked_ns) {
                return Err(HistoryError::ReturnBeforeInvoke { entry: index });
            }
            if let Operation::Append { events, .. } = &entry.operation {
                if events.is_empty() {
                    return Err(HistoryError::EmptyAppend { entry: index });
                }
            }
            if let Some(outcome) = &entry.outcome {
                if !fits(&entry.operation, outcome) {
                    return Err(HistoryError::OutcomeDoesNotFit { entry: index });
                }
            }
            // Unknown outcomes end nothing: the client may go on (the request is dead
            // to it), and its later operations are concurrent with the unknown one.
            if let Some(returned) = entry.returned_ns {
                if last_return_by_client.get(&entry.client).is_some_and(|&last| last > entry.invoked_ns) {
                    return Err(HistoryError::ClientOverlaps { client: entry.client, entry: index });
                }
                last_return_by_client.insert(entry.client, returned);
            }
        }
        Ok(History { entries })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn fits(operation: &Operation, outcome: &Outcome) -> bool {
    match operation {
        Operation::Append { .. } => matches!(
            outcome,
            Outcome::Appended { .. }
                | Outcome::SeqConflict { .. }
                | Outcome::KeyReused { .. }
                | Outcome::Busy
                | Outcome::RunNotAttached
        ),
        Operation::Read { .. } | Operation::Tail { .. } => matches!(outcome, Outcome::Events(_)),
        Operation::Attach { .. } => matches!(outcome, Outcome::Attached | Outcome::RunExists | Outcome::Busy),
        Operation::Detach { .. } => matches!(outcome, Outcome::Detached | Outcome::RunNotAttached),
    }
}

/// The sequential specification: a session as one thread would see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SessionModel {
    log: Vec<Label>,
    /// Per seq: whether the event belongs to a keyed batch (a keyless retry never
    /// matches one).
    keyed: Vec<bool>,
    /// Key → (first seq, the batch's events).
    keys: BTreeMap<String, (u64, Vec<Label>)>,
    attached: Option<String>,
}

impl SessionModel {
    pub fn log(&self) -> &[Label] {
        &self.log
    }

    /// What the session answers to `operation` now, and its effect (deterministic; the
    /// outcomes the model also allows without effect are in `allows`).
    pub fn apply(&mut self, operation: &Operation) -> Outcome {
        let next_seq = self.log.len() as u64;
        match operation {
            Operation::Append { events, expected_seq, key, run } => {
                let start = expected_seq.unwrap_or(next_seq);
                // A stored key answers its batch even to a run that is gone (keys are
                // honoured for the session's life); anything else needs the run attached.
                let stored = key.as_ref().and_then(|key| self.keys.get(key));
                if let Some((first_seq, stored)) = stored {
                    return if stored == events {
                        let next_seq = first_seq + stored.len() as u64;
                        Outcome::Appended { first_seq: *first_seq, next_seq, duplicate: true }
                    } else {
                        Outcome::KeyReused { first_seq: *first_seq }
                    };
                }
                if run.is_some() && self.attached != *run {
                    return Outcome::RunNotAttached;
                }
                match key {
                    Some(key) => {
                        if start != next_seq {
                            return Outcome::SeqConflict { next_seq };
                        }
                        self.keys.insert(key.clone(), (start, events.clone()));
                        self.push(events, true);
                    }
                    None if start != next_seq => {
                        // The content rule: a retry whose events are stored identically.
                        let (from, to) = (start as usize, start as usize + events.len());
                        let same = to <= self.log.len()
                            && self.log[from..to] == events[..]
                            && !self.keyed[from..to].iter().any(|&keyed| keyed);
                        return if same {
                            Outcome::Appended { first_seq: start, next_seq, duplicate: true }
                        } else {
                            Outcome::SeqConflict { next_seq }
                        };
                    }
                    None => self.push(events, false),
                }
                Outcome::Appended { first_seq: start, next_seq: start + events.len() as u64, duplicate: false }
            }
            Operation::Read { from, limit } => {
                let from = (*from).min(next_seq) as usize;
                let to = from.saturating_add(*limit as usize).min(self.log.len());
                Outcome::Events(self.log[from..to].to_vec())
            }
            Operation::Tail { from } => Outcome::Events(self.log[(*from).min(next_seq) as usize..].to_vec()),
            Operation::Attach { run } => match &self.attached {
                Some(attached) if attached == run => Outcome::RunExists,
                Some(_) => Outcome::Busy,
                None => {
                    self.attached = Some(run.clone());
                    Outcome::Attached
                }
            },
            Operation::Detach { run } => {
                if self.attached.as_ref() == Some(run) {
                    self.attached = None;
                    Outcome::Detached
                } else {
                    Outcome::RunNotAttached
                }
            }
        }
    }

    fn push(&mut self, events: &[Label], keyed: bool) {
        self.log.extend_from_slice(events);
        self.keyed.extend(std::iter::repeat_n(keyed, events.len()));
    }

    /// The state after `operation` answered `observed` here, if the session allows that
    /// answer now; `observed = None` (unknown) takes the operation's effect.
    pub fn allows(&self, operation: &Operation, observed: Option<&Outcome>) -> Option<SessionModel> {
        let mut next = self.clone();
        let expected = next.apply(operation);
        let Some(observed) = observed else { return Some(next) };
        match (operation, observed) {
            // A busy writer lease refuses an append without effect, at any time.
            (Operation::Append { .. }, Outcome::Busy) => Some(self.clone()),
            // A tail received a prefix of what was there.
            (Operation::Tail { .. }, Outcome::Events(received)) => {
                let Outcome::Events(there) = expected else { return None };
                there.starts_with(received).then_some(next)
            }
            _ => (expected == *observed).then_some(next),
        }
    }
}

/// A linearization: the entries in the order they took effect (unknown entries that
/// never took effect are left out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linearization {
    pub order: Vec<usize>,
    pub states_visited: usize,
}

/// Why a history was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// No order of the operations respects real time and the model. At the deepest
    /// point the search reached, `linearized` known entries were placed (in `prefix`
    /// order) and none of `stuck` (the known entries that could go next) fit.
    NotLinearizable { linearized: usize, prefix: Vec<usize>, stuck: Vec<usize>, states_visited: usize },
    /// The search visited `states_max` states without an answer.
    Inconclusive { states_visited: usize },
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::NotLinearizable { linearized, prefix, stuck, states_visited } => {
                let tail = &prefix[prefix.len().saturating_sub(8)..];
                write!(
                    f,
                    "not linearizable: at best {linearized} known entries placed (order ending {tail:?}); none of \
                     the entries {stuck:?} fits next ({states_visited} states visited)"
                )
            }
            CheckError::Inconclusive { states_visited } => {
                write!(f, "inconclusive: {states_visited} states visited without an answer")
            }
        }
    }
}

impl std::error::Error for CheckError {}

/// Checks `history` against a fresh session (`SessionModel::default()`), visiting at
/// most `STATES_MAX_DEFAULT` states.
pub fn check(history: &History) -> Result<Linearization, CheckError> {
    check_from(history, SessionModel::default(), STATES_MAX_DEFAULT)
}

/// Checks `history` against a session that starts in `initial`.
pub fn check_from(history: &History, initial: SessionModel, states_max: usize) -> Result<Linearization, CheckError> {
    let entries = history.entries();
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&index| (entries[index].invoked_ns, index));
    // Unknown reads and tails neither constrain nor change anything: leave them out.
    order.retain(|&index| {
        let entry = &entries[index];
        entry.outcome.is_some() || !matches!(entry.operation, Operation::Read { .. } | Operation::Tail { .. })
    });
    let mut search = Search {
        entries,
        order,
        visited: HashSet::new(),
        states_max,
        path: Vec::new(),
        best: (0, Vec::new(), Vec::new()),
    };
    let known = search.order.iter().filter(|&&index| entries[index].returned_ns.is_some()).count();
    let done = Bits::new(search.order.len());
    match search.run(done, initial, known) {
        Some(true) => Ok(Linearization { order: search.path, states_visited: search.visited.len() }),
        Some(false) => {
            let (linearized, prefix, stuck) = search.best;
            Err(CheckError::NotLinearizable { linearized, prefix, stuck, states_visited: search.visited.len() })
        }
        None => Err(CheckError::Inconclusive { states_visited: search.visited.len() }),
    }
}

/// A fixed-size bit set over positions in `Search::order`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(len: usize) -> Bits {
        Bits(vec![0; len.div_ceil(64)])
    }

    fn get(&self, index: usize) -> bool {
        self.0[index / 64] & (1 << (index % 64)) != 0
    }

    fn set(&mut self, index: usize, on: bool) {
        if on {
            self.0[index / 64] |= 1 << (index % 64);
        } else {
            self.0[index / 64] &= !(1 << (index % 64));
        }
    }
}

struct Search<'a> {
    entries: &'a [Entry],
    /// Entry indexes by invocation time.
    order: Vec<usize>,
    visited: HashSet<(Bits, SessionModel)>,
    states_max: usize,
    /// The entries placed so far (the answer, on success).
    path: Vec<usize>,
    /// The deepest dead end: known entries placed, the path there, the known candidates.
    best: (usize, Vec<usize>, Vec<usize>),
}

impl Search<'_> {
    /// `Some(true)`: the rest linearizes from here; `Some(false)`: it does not;
    /// `None`: out of budget. `pending_known` counts the known entries not yet placed.
    fn run(&mut self, mut done: Bits, state: SessionModel, pending_known: usize) -> Option<bool> {
        if pending_known == 0 {
            return Some(true);
        }
        if self.visited.len() >= self.states_max {
            return None;
        }
        if !self.visited.insert((done.clone(), state.clone())) {
            return Some(false);
        }
        // Whatever goes next must have been invoked before the earliest return among
        // the known entries not yet placed (that one precedes everything invoked later).
        let horizon = self
            .order
            .iter()
            .enumerate()
            .filter(|&(position, _)| !done.get(position))
            .filter_map(|(_, &index)| self.entries[index].returned_ns)
            .min()
            .unwrap_or(u64::MAX);
        let mut stuck = Vec::new();
        for position in 0..self.order.len() {
            let index = self.order[position];
            let entry = &self.entries[index];
            if entry.invoked_ns > horizon {
                break;
            }
            if done.get(position) {
                continue;
            }
            let Some(next) = state.allows(&entry.operation, entry.outcome.as_ref()) else {
                if entry.returned_ns.is_some() {
                    stuck.push(index);
                }
                continue;
            };
            done.set(position, true);
            self.path.push(index);
            let known = usize::from(entry.returned_ns.is_some());
            match self.run(done.clone(), next, pending_known - known) {
                Some(false) => {}
                answer => return answer,
            }
            self.path.pop();
            done.set(position, false);
            if entry.returned_ns.is_some() {
                stuck.push(index);
            }
        }
        let placed = self.path.iter().filter(|&&index| self.entries[index].returned_ns.is_some()).count();
        if placed >= self.best.0 && (placed > self.best.0 || self.best.1.is_empty()) {
            self.best = (placed, self.path.clone(), stuck);
        }
        Some(false)
    }
}

#[cfg(test)]
mod tests;
