//! The SQL that damages one tenant's stored audit rows behind a catalog's back, for the
//! tamper-detection clauses of the catalog and service suites. Tenant ids are
//! `[A-Za-z0-9._~-]`, so quoting them is safe. A swap exchanges two entries' contents, so
//! each sits at the other's position.

#![allow(dead_code)] // each test binary uses one of the two dialects

use berth_core::TenantId;
use berth_testkit::catalog_conformance::AuditTamper;

/// For the SQLite catalog (`SqliteCatalog::execute_for_tests`).
pub fn sqlite(tenant: &TenantId, tamper: AuditTamper) -> String {
    let rows = format!("FROM audit WHERE tenant = '{tenant}'");
    match tamper {
        AuditTamper::ChangeField { seq } => format!(
            "UPDATE audit SET entry_json = json_set(entry_json, '$.action', 'forged') \
             WHERE tenant = '{tenant}' AND seq = {seq}"
        ),
        AuditTamper::DeleteEntry { seq } => format!("DELETE {rows} AND seq = {seq}"),
        AuditTamper::DeleteLast => format!("DELETE {rows} AND seq = (SELECT max(seq) {rows})"),
        AuditTamper::Swap { first, second } => format!(
            "UPDATE audit SET entry_json = CASE seq \
                 WHEN {first} THEN (SELECT entry_json {rows} AND seq = {second}) \
                 WHEN {second} THEN (SELECT entry_json {rows} AND seq = {first}) END \
             WHERE tenant = '{tenant}' AND seq IN ({first}, {second})"
        ),
    }
}

/// For the PostgreSQL catalog (run on a plain connection to the test database).
pub fn postgres(tenant: &TenantId, tamper: AuditTamper) -> String {
    let rows = format!("FROM audit WHERE tenant = '{tenant}'");
    match tamper {
        AuditTamper::ChangeField { seq } => format!(
            "UPDATE audit SET entry_json = jsonb_set(entry_json::jsonb, '{{action}}', '\"forged\"')::text \
             WHERE tenant = '{tenant}' AND seq = {seq}"
        ),
        AuditTamper::DeleteEntry { seq } => format!("DELETE {rows} AND seq = {seq}"),
        AuditTamper::DeleteLast => format!("DELETE {rows} AND seq = (SELECT max(seq) {rows})"),
        AuditTamper::Swap { first, second } => format!(
            "UPDATE audit AS a SET entry_json = b.entry_json FROM audit AS b \
             WHERE a.tenant = '{tenant}' AND b.tenant = '{tenant}' \
               AND ((a.seq = {first} AND b.seq = {second}) OR (a.seq = {second} AND b.seq = {first}))"
        ),
    }
}
