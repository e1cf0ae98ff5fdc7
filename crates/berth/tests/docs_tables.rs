//! The error tables of the docs are derived from `berth_core::ErrorClass::TABLE`: the
//! "Errors" table of `docs/reference/http.md` (code, status, retryable) and the exit-code table
//! of `docs/reference/cli.md` (which codes exit with which code, which are retryable) must say
//! what the table says. A class added, a status or an exit code changed without the docs
//! fails here. The exit-code tables of `docs/reference/cli.md` and `README.md` list exactly the
//! codes the CLI can exit with (`berth::exit::all`).

use berth_core::ErrorClass;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn read_doc(name: &str) -> String {
    read_file(&Path::new("docs").join(name))
}

/// A file of the repository, by its path from the root.
fn read_file(path: &Path) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)).unwrap()
}

/// The exit codes of a table's first column, in order.
fn exit_codes_of(rows: &[Vec<String>]) -> Vec<u8> {
    rows.iter().map(|row| row[0].parse().unwrap_or_else(|_| panic!("exit code {:?}", row[0]))).collect()
}

/// The rows (cells, trimmed) of the first Markdown table after `heading`, without its
/// header and separator lines.
fn table_after(document: &str, heading: &str) -> Vec<Vec<String>> {
    let start = document.find(heading).unwrap_or_else(|| panic!("no {heading:?}"));
    let lines = document[start..].lines().skip_while(|line| !line.starts_with('|'));
    let table: Vec<&str> = lines.take_while(|line| line.starts_with('|')).collect();
    assert!(table.len() > 2, "no table after {heading:?}");
    table[2..]
        .iter()
        .map(|line| {
            let inner = line.trim().strip_prefix('|').and_then(|line| line.strip_suffix('|')).unwrap_or(line);
            inner.split('|').map(|cell| cell.trim().to_owned()).collect()
        })
        .collect()
}

/// The `code`s quoted in a cell.
fn codes_in(cell: &str) -> BTreeSet<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

fn yes_no(cell: &str) -> bool {
    match cell {
        "yes" => true,
        "no" => false,
        other => panic!("retryable must be yes or no, not {other:?}"),
    }
}

#[test]
fn the_server_error_table_is_the_class_table() {
    let rows = table_after(&read_doc("reference/http.md"), "## Errors");
    let mut documented = BTreeMap::new();
    for row in &rows {
        let code = codes_in(&row[0]).into_iter().next().unwrap_or_else(|| panic!("no code in {row:?}"));
        let status: u16 = row[1].parse().unwrap_or_else(|_| panic!("status of {code}: {:?}", row[1]));
        assert!(documented.insert(code.clone(), (status, yes_no(&row[2]))).is_none(), "{code} twice");
    }
    let table: BTreeMap<String, (u16, bool)> =
        ErrorClass::TABLE.iter().map(|row| (row.code.to_owned(), (row.http_status, row.retryable))).collect();
    assert_eq!(
        documented, table,
        "docs/reference/http.md \"Errors\" (code → status, retryable) differs from ErrorClass::TABLE"
    );
    let order: Vec<&str> = ErrorClass::TABLE.iter().map(|row| row.code).collect();
    let documented_order: Vec<String> = rows.iter().flat_map(|row| codes_in(&row[0])).collect();
    assert_eq!(documented_order, order, "docs/reference/http.md lists the classes in the table's order");
}

#[test]
fn the_cli_exit_code_table_is_the_class_table() {
    let rows = table_after(&read_doc("reference/cli.md"), "## Exit codes");
    let mut documented: BTreeMap<String, (u8, bool)> = BTreeMap::new();
    for row in &rows {
        let exit_code: u8 = row[0].parse().unwrap_or_else(|_| panic!("exit code {:?}", row[0]));
        let codes = codes_in(&row[2]);
        let retryable = match row[3].as_str() {
            "yes" => codes.clone(),
            "no" | "" => BTreeSet::new(),
            listed => codes_in(listed),
        };
        assert!(retryable.is_subset(&codes), "exit {exit_code}: retryable codes not in the row");
        for code in codes {
            let is_retryable = retryable.contains(&code);
            assert!(documented.insert(code.clone(), (exit_code, is_retryable)).is_none(), "{code} twice");
        }
    }
    let mut table: BTreeMap<String, (u8, bool)> =
        ErrorClass::TABLE.iter().map(|row| (row.code.to_owned(), (row.exit_code, row.retryable))).collect();
    // The CLI's own: a usage error has no HTTP counterpart.
    table.insert(berth::exit::USAGE_CODE.to_owned(), (berth::exit::USAGE, false));
    assert_eq!(
        documented, table,
        "docs/reference/cli.md exit codes (code → exit, retryable) differ from ErrorClass::TABLE"
    );
    assert_eq!(exit_codes_of(&rows), berth::exit::all(), "docs/reference/cli.md lists every exit code, in order");
    // Exit code 7 is exactly the retryable classes other than `fenced` (a conflict).
    for row in ErrorClass::TABLE {
        assert_eq!(row.exit_code == 7, row.retryable && row.class != ErrorClass::Fenced, "{row:?}");
    }
}

#[test]
fn the_readme_exit_code_table_lists_every_exit_code() {
    let rows = table_after(&read_file(Path::new("README.md")), "## Exit codes");
    assert_eq!(exit_codes_of(&rows), berth::exit::all(), "README.md \"Exit codes\" lists every exit code, in order");
    for row in &rows {
        assert!(row.len() == 2 && !row[1].is_empty(), "README.md: exit {} needs its meaning: {row:?}", row[0]);
    }
}
