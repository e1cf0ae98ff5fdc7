//! The crate graph obeys `ARCHITECTURE.md`'s layers: every workspace crate's normal
//! dependencies on other workspace crates are checked against an allow-list written
//! here, read from `cargo metadata` (so a new edge in any `Cargo.toml` fails this test,
//! named). Cargo alone only stops a crate from naming a crate it does not list; this
//! stops the list from growing upwards.
//!
//! Dev-dependencies are freer: a crate's tests may assemble a whole stack above it
//! (the PostgreSQL backend's tests run the service over it; the server's tests build a
//! service from a URL), so they are not held to the layers. Two rules still hold for
//! them: nothing but `berth` itself depends on `berth` (the CLI and facade is the top;
//! a test needing it belongs in `crates/berth/tests`), and `berth-core` has no
//! workspace dev-dependency (the core is tested alone).

use std::collections::{BTreeMap, BTreeSet};

/// The workspace crates each crate may depend on (normal dependencies), by layer:
/// core → seams (store, catalog) → backends (jsonl, sqlite, postgres) → service →
/// assembly (backends from a URL) and the wire types → server → bench, testkit → berth →
/// berth-python (the Python package's native module).
const ALLOWED_NORMAL_DEPENDENCIES: &[(&str, &[&str])] = &[
    ("berth-core", &[]),
    // Test support only (golden files): std, no workspace crate.
    ("berth-golden", &[]),
    ("berth-store", &["berth-core"]),
    ("berth-catalog", &["berth-core"]),
    ("berth-jsonl", &["berth-core", "berth-store"]),
    ("berth-sqlite", &["berth-core", "berth-catalog"]),
    ("berth-postgres", &["berth-core", "berth-store", "berth-catalog"]),
    ("berth-service", &["berth-core", "berth-store", "berth-catalog"]),
    // The wire contract: its own types over the core's ids, nothing of the catalog or
    // storage (the server converts at its edge).
    ("berth-api", &["berth-core"]),
    // The one place backends are chosen from a URL (and their file names written).
    (
        "berth-assemble",
        &[
            "berth-core",
            "berth-store",
            "berth-catalog",
            "berth-jsonl",
            "berth-sqlite",
            "berth-postgres",
            "berth-service",
        ],
    ),
    // The server calls the service and speaks `berth-api`. `berth-catalog` is there
    // because the service's answers are catalog records (`SessionRecord`, `RunRecord`,
    // `AuditEntry`, `RetentionPolicy`), which the server converts to wire types. No
    // backend, no LogStore: which storage serves it is its caller's choice.
    ("berth-server", &["berth-core", "berth-catalog", "berth-service", "berth-api"]),
    (
        "berth-bench",
        &[
            "berth-core",
            "berth-store",
            "berth-catalog",
            "berth-jsonl",
            "berth-sqlite",
            "berth-postgres",
            "berth-service",
            "berth-api",
            "berth-assemble",
            "berth-server",
        ],
    ),
    ("berth-testkit", &["berth-core", "berth-store", "berth-catalog", "berth-jsonl", "berth-service"]),
    (
        "berth",
        &[
            "berth-core",
            "berth-store",
            "berth-catalog",
            "berth-jsonl",
            "berth-sqlite",
            "berth-postgres",
            "berth-service",
            "berth-api",
            "berth-assemble",
            "berth-server",
            "berth-bench",
        ],
    ),
    // The Python package's native module: a host of the library facade, as the CLI is
    // (the facade opens a store from a URL with its change feed; the server answers
    // the `/v1` routes in-process).
    ("berth-python", &["berth", "berth-core", "berth-service", "berth-server"]),
];

/// One workspace crate's dependencies on other workspace crates.
#[derive(Debug, Default)]
struct WorkspaceEdges {
    normal: BTreeSet<String>,
    dev: BTreeSet<String>,
}

/// `cargo metadata --no-deps` for this workspace: crate name → its workspace edges.
fn workspace_graph() -> BTreeMap<String, WorkspaceEdges> {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(output.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let members: BTreeSet<String> =
        packages.iter().filter_map(|package| package["name"].as_str()).map(str::to_owned).collect();
    let mut graph = BTreeMap::new();
    for package in packages {
        let name = package["name"].as_str().expect("package name").to_owned();
        let mut edges = WorkspaceEdges::default();
        for dependency in package["dependencies"].as_array().expect("dependencies") {
            let target = dependency["name"].as_str().expect("dependency name");
            if !members.contains(target) {
                continue;
            }
            match dependency["kind"].as_str() {
                None | Some("build") => edges.normal.insert(target.to_owned()),
                Some(_dev) => edges.dev.insert(target.to_owned()),
            };
        }
        graph.insert(name, edges);
    }
    graph
}

/// Every edge the layers forbid, as "from -> to (why)".
fn forbidden_edges(graph: &BTreeMap<String, WorkspaceEdges>) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED_NORMAL_DEPENDENCIES.iter().copied().collect();
    let mut forbidden = Vec::new();
    for (name, edges) in graph {
        let Some(allowed_targets) = allowed.get(name.as_str()) else {
            forbidden.push(format!("{name} is not in ARCHITECTURE.md's layers (add it to the allow-list)"));
            continue;
        };
        for target in &edges.normal {
            if !allowed_targets.contains(&target.as_str()) {
                forbidden.push(format!("{name} -> {target} (a dependency its layer does not allow)"));
            }
        }
        for target in &edges.dev {
            if target == "berth" && name != "berth" {
                forbidden.push(format!("{name} -[dev]-> berth (nothing below the top depends on it)"));
            }
            if name == "berth-core" {
                forbidden.push(format!("berth-core -[dev]-> {target} (the core is tested alone)"));
            }
        }
    }
    forbidden
}

fn print_graph(graph: &BTreeMap<String, WorkspaceEdges>) {
    println!("workspace crate graph (normal; [dev]):");
    for (name, edges) in graph {
        let normal: Vec<&str> = edges.normal.iter().map(String::as_str).collect();
        let dev: Vec<&str> = edges.dev.difference(&edges.normal).map(String::as_str).collect();
        println!("  {name} -> {} [dev: {}]", normal.join(", "), dev.join(", "));
    }
}

#[test]
fn the_crate_graph_follows_the_layers_of_architecture_md() {
    let graph = workspace_graph();
    print_graph(&graph);
    assert!(graph.len() >= ALLOWED_NORMAL_DEPENDENCIES.len() - 1, "cargo metadata listed too few crates");
    let forbidden = forbidden_edges(&graph);
    assert!(forbidden.is_empty(), "forbidden dependency edges:\n  {}", forbidden.join("\n  "));
}

#[test]
fn a_planted_upward_edge_is_named() {
    let mut graph = workspace_graph();
    graph.get_mut("berth-server").expect("berth-server is a member").normal.insert("berth-jsonl".to_owned());
    graph.get_mut("berth-store").expect("berth-store is a member").dev.insert("berth".to_owned());
    let forbidden = forbidden_edges(&graph);
    assert!(forbidden.iter().any(|edge| edge.starts_with("berth-server -> berth-jsonl")), "{forbidden:?}");
    assert!(forbidden.iter().any(|edge| edge.starts_with("berth-store -[dev]-> berth ")), "{forbidden:?}");
}
