//! Export and import (R-S13): the logical log as JSONL — one canonical header line
//! (`{"berth":"session-export","header":…,"metadata":…,"version":1}`, keys sorted) then
//! one line per event (the envelope in its fixed field order, `data` exactly as stored,
//! R-C9) — byte-identical whichever backend stored it; a ZIP of a session and its forks.
//! Import into any backend; export → import → export is byte-identical.
//!
//! Versions: 1 since exact data; 0 (canonical data) is still imported as it is —
//! canonical text is valid exact text — and its sessions keep their header version.

use crate::{Principal, SessionService};
use berth_catalog::{SessionQuery, SessionRecord};
use berth_core::json::{canonical_string, parse_strict};
use berth_core::{Error, Event, Result, SessionHeader, SessionId};
use berth_store::Access;
use std::io::{Read, Write};

pub const EXPORT_MAGIC: &str = "session-export";
/// The export version this build writes. An older berth refuses version 1, whose event
/// data it would re-canonicalize on import.
pub const EXPORT_VERSION: u64 = 1;
/// The oldest export version this build imports.
pub const EXPORT_VERSION_OLDEST: u64 = 0;

impl SessionService {
    /// The session's logical log as JSONL (canonical header line, exact event data).
    pub async fn export(&self, principal: &Principal, id: &SessionId) -> Result<Vec<u8>> {
        let record = self.load(principal, id, "export").await?;
        let bytes = self.export_record(&record).await?;
        self.audit_ok(principal, "export", &record, serde_json::json!({"bytes": bytes.len()})).await;
        Ok(bytes)
    }

    async fn export_record(&self, record: &SessionRecord) -> Result<Vec<u8>> {
        let handle = self.store.open(&record.key(), Access::Read).await?;
        let events = handle.read(0, None).await;
        let _ = handle.close().await;
        let events = events?;
        // The metadata counts the events exported: after a crash the catalog's count may
        // lag the log (activity held in memory is lost, `activity.rs`), and an import
        // counts what it stores, so export → import → export stays byte-identical.
        let mut counted = record.clone();
        counted.event_count = counted.event_count.max(events.len() as u64);
        let mut metadata = serde_json::to_value(&counted).map_err(|e| Error::invalid("metadata", e.to_string()))?;
        let header = metadata.as_object_mut().and_then(|object| object.remove("header")).unwrap_or_default();
        let first = serde_json::json!({"berth": EXPORT_MAGIC, "version": EXPORT_VERSION, "header": header, "metadata": metadata});
        let mut out = canonical_string(&first).into_bytes();
        out.push(b'\n');
        for event in &events {
            out.extend_from_slice(event.to_canonical_json().as_bytes());
            out.push(b'\n');
        }
        Ok(out)
    }

    /// A ZIP holding the session and, recursively, its forks (parents first).
    pub async fn export_zip(&self, principal: &Principal, id: &SessionId) -> Result<Vec<u8>> {
        let root = self.load(principal, id, "export").await?;
        let mut order = vec![root];
        let mut index = 0;
        while index < order.len() {
            let mut forks = self.forks_of(principal, &order[index]).await?;
            forks.sort_by(|a, b| a.header.id.cmp(&b.header.id));
            order.extend(forks);
            index += 1;
        }
        let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default());
        for (position, record) in order.iter().enumerate() {
            let bytes = self.export_record(record).await?;
            let name = format!("{position:04}-{}.jsonl", record.header.id);
            writer.start_file(name, options).map_err(zip_error)?;
            writer.write_all(&bytes).map_err(|e| Error::io("zip write", &e))?;
        }
        let bytes = writer.finish().map_err(zip_error)?.into_inner();
        let details = serde_json::json!({"sessions": order.len(), "bytes": bytes.len()});
        self.audit_ok(principal, "export", &order[0], details).await;
        Ok(bytes)
    }

    async fn forks_of(&self, principal: &Principal, record: &SessionRecord) -> Result<Vec<SessionRecord>> {
        let mut query = SessionQuery::tenant(principal.tenant.clone());
        query.parent = Some(record.header.id.clone());
        query.include_blank = true;
        query.limit = berth_core::limits::PAGE_SIZE_MAX;
        let forks = self.catalog.list(&query).await?;
        Ok(forks
            .into_iter()
            .filter(|fork| fork.status != berth_core::lifecycle::Status::Creating)
            .filter(|fork| principal.can_access(&fork.header.scope))
            .collect())
    }

    /// Imports one exported session into this service's backends, keeping its header,
    /// metadata and events exactly. The export must belong to the caller's tenant.
    pub async fn import(&self, principal: &Principal, bytes: &[u8]) -> Result<SessionRecord> {
        let inflated_max = self.import_inflated_bytes_max;
        if bytes.len() as u64 > inflated_max {
            return Err(Error::LimitExceeded {
                what: IMPORT_INFLATED_WHAT,
                limit: inflated_max,
                actual: bytes.len() as u64,
            });
        }
        let owned = bytes.to_vec();
        let (record, events) = self.decode_import(move || parse_export(&owned)).await?;
        self.import_parsed(principal, record, events).await
    }

    /// Imports every session of a ZIP made by `export_zip`, in order. Every entry is
    /// inflated first, as a stream capped at `import_inflated_bytes_max` in total (the
    /// sizes the ZIP declares are not trusted), and parsed, so an archive over the cap
    /// or with an unreadable entry stores nothing.
    pub async fn import_zip(&self, principal: &Principal, bytes: &[u8]) -> Result<Vec<SessionRecord>> {
        let (owned, inflated_max) = (bytes.to_vec(), self.import_inflated_bytes_max);
        let sessions = self
            .decode_import(move || {
                let entries = inflate_zip_entries(&owned, inflated_max)?;
                entries.iter().map(|content| parse_export(content)).collect::<Result<Vec<_>>>()
            })
            .await?;
        let mut imported = Vec::with_capacity(sessions.len());
        for (record, events) in sessions {
            imported.push(self.import_parsed(principal, record, events).await?);
        }
        Ok(imported)
    }

    async fn import_parsed(
        &self,
        principal: &Principal,
        record: SessionRecord,
        events: Vec<Event>,
    ) -> Result<SessionRecord> {
        let refusal = if record.header.scope.tenant != principal.tenant {
            Some("the export belongs to another tenant")
        } else if !principal.can_access(&record.header.scope) {
            Some("the export belongs to another user or project")
        } else {
            None
        };
        if let Some(reason) = refusal {
            let error = Error::Forbidden { reason: reason.into() };
            let id = Some(&record.header.id);
            return Err(self.denied_in_tenant(principal, "import", id, error).await);
        }
        self.create_from_record(principal, record, &events, "import", |_| Vec::new()).await
    }

    /// Runs an import's decoding — inflating, parsing, validating: CPU work of up to
    /// `import_inflated_bytes_max` bytes — on the blocking pool, at most
    /// `IMPORT_DECODES_CONCURRENT_MAX` at once in this process, so that imports never hold
    /// the async runtime's workers (two ZIP bombs once held every other tenant's requests
    /// for seconds on a 2-core machine).
    pub(crate) async fn decode_import<T: Send + 'static>(
        &self,
        decode: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let _permit = self.import_decodes.acquire().await.map_err(|_| closed_pool())?;
        tokio::task::spawn_blocking(decode).await.map_err(|_| closed_pool())?
    }
}

/// Imports decoded at once in one process (each may inflate `import_inflated_bytes_max`).
pub const IMPORT_DECODES_CONCURRENT_MAX: usize = 2;

fn closed_pool() -> Error {
    Error::io("import decoding", &std::io::Error::other("the blocking pool stopped"))
}

/// The `what` of an import whose inflated bytes exceed the cap.
const IMPORT_INFLATED_WHAT: berth_core::limits::Limit = berth_core::limits::Limit::ImportInflatedBytes;

/// The entries of a ZIP in name order, inflated, `inflated_max` bytes at most in all:
/// each entry is read through `Read::take` with what is left of the budget (plus one byte,
/// to tell "exactly at the cap" from "over it"), so no more than the cap is ever inflated.
fn inflate_zip_entries(bytes: &[u8], inflated_max: u64) -> Result<Vec<Vec<u8>>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(zip_error)?;
    let mut names: Vec<String> = archive.file_names().map(str::to_owned).collect();
    names.sort();
    let mut inflated_total: u64 = 0;
    let mut entries = Vec::with_capacity(names.len());
    for name in names {
        let file = archive.by_name(&name).map_err(zip_error)?;
        let budget = inflated_max - inflated_total;
        let mut content = Vec::new();
        file.take(budget + 1).read_to_end(&mut content).map_err(|e| Error::io("zip read", &e))?;
        inflated_total += content.len() as u64;
        if inflated_total > inflated_max {
            return Err(Error::LimitExceeded {
                what: IMPORT_INFLATED_WHAT,
                limit: inflated_max,
                actual: inflated_total,
            });
        }
        entries.push(content);
    }
    Ok(entries)
}

/// Parses an export into its record and events (validated; seqs contiguous from 0).
pub fn parse_export(bytes: &[u8]) -> Result<(SessionRecord, Vec<Event>)> {
    let mut lines = bytes.split(|byte| *byte == b'\n');
    let first = lines.next().filter(|line| !line.is_empty()).ok_or_else(|| Error::invalid("export", "empty"))?;
    let mut first = parse_strict(first)?;
    let object = first.as_object_mut().ok_or_else(|| Error::invalid("export", "first line is not an object"))?;
    if object.get("berth").and_then(|v| v.as_str()) != Some(EXPORT_MAGIC) {
        return Err(Error::invalid("export", "not a berth session export"));
    }
    let version = object.get("version").and_then(|v| v.as_u64()).unwrap_or(u64::MAX);
    if !(EXPORT_VERSION_OLDEST..=EXPORT_VERSION).contains(&version) {
        return Err(Error::FormatUnsupported {
            reason: format!("export version {version} (this build reads {EXPORT_VERSION_OLDEST} to {EXPORT_VERSION})"),
            location: None,
        });
    }
    let header: SessionHeader = serde_json::from_value(object.remove("header").unwrap_or_default())
        .map_err(|e| Error::invalid("export header", e.to_string()))?;
    header.validate()?;
    let mut metadata = object.remove("metadata").unwrap_or_default();
    if let Some(map) = metadata.as_object_mut() {
        map.insert("header".into(), serde_json::to_value(&header).unwrap_or_default());
    }
    let record: SessionRecord =
        serde_json::from_value(metadata).map_err(|e| Error::invalid("export metadata", e.to_string()))?;
    let mut events = Vec::new();
    for line in lines.filter(|line| !line.is_empty()) {
        let text = std::str::from_utf8(line).map_err(|_| Error::invalid("export", "event line is not UTF-8"))?;
        let event: Event = serde_json::from_str(text).map_err(|e| Error::invalid("export event", e.to_string()))?;
        if event.seq.get() != events.len() as u64 {
            return Err(Error::invalid("export", format!("event seq {} out of order", event.seq)));
        }
        events.push(event);
    }
    Ok((record, events))
}

fn zip_error(error: zip::result::ZipError) -> Error {
    Error::invalid("zip", error.to_string())
}
