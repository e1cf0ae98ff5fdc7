//! The "LangGraph state" section of a LangGraph thread's session page (issue 55 item 6):
//! the checkpoints among the timeline page's events (so it pages as the timeline pages),
//! and for a selected one (`?cp=<seq>`) its messages, every channel with its version,
//! serialized type and size, and the channels changed from its parent or from another
//! checkpoint (`&vs=<seq>`). No script, no Python: the records are read in Rust.
//!
//! `decode` (the records' MessagePack, pure), `diff` (changed channels, pure), `state`
//! (the bounded reads of a selected checkpoint), `render` (the markup).

mod decode;
mod diff;
mod render;
mod state;

use crate::api::Shared;
use crate::error::ApiError;
use crate::ui::signin::Viewer;
use berth_catalog::SessionRecord;
use berth_core::Event;
use maud::Markup;

/// The drop-in's label on a thread's session, and its record types.
pub const LABEL: &str = "langgraph";
pub const CHECKPOINT: &str = "lg/checkpoint";
pub const BLOB: &str = "lg/blob";
/// Most parts of one split value read (the drop-in's batch limit, 8 MiB, is ~11 parts).
pub const PARTS_MAX: u64 = 16;
/// Checkpoints listed from one page of the timeline (the latest).
pub const CHECKPOINTS_LISTED_MAX: usize = 50;

/// Whether a session is a LangGraph thread: labelled so, or with the drop-in's records
/// among the page's events.
pub fn is_langgraph(record: &SessionRecord, events: &[Event]) -> bool {
    record.labels.contains(LABEL) || events.iter().any(|event| event.event_type.as_str().starts_with("lg/"))
}

/// Where the section's links lead: the session page with the timeline's own query
/// (`before`, `order`) kept.
pub struct Links<'a> {
    pub path: String,
    pub kept: &'a [(&'static str, String)],
}

impl Links<'_> {
    fn to(&self, cp: Option<u64>, vs: Option<u64>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in self.kept {
            query.append_pair(name, value);
        }
        if let Some(cp) = cp {
            query.append_pair("cp", &cp.to_string());
        }
        if let Some(vs) = vs {
            query.append_pair("vs", &vs.to_string());
        }
        let query = query.finish();
        let separator = if query.is_empty() { "" } else { "?" };
        format!("{}{separator}{query}#langgraph", self.path)
    }
}

/// The section: the page's checkpoints, and the selected one's state when `cp` is given.
pub async fn section(
    state: &Shared,
    viewer: &Viewer,
    record: &SessionRecord,
    page_events: &[Event],
    links: &Links<'_>,
    selection: (Option<u64>, Option<u64>),
) -> Result<Markup, ApiError> {
    let listed = render::listed_checkpoints(page_events);
    let selected = match selection {
        (Some(cp), vs) => Some(state::read_selected(state, viewer, &record.header.id, cp, vs).await?),
        (None, Some(_)) => return Err(ApiError::bad_request("vs: give cp too")),
        (None, None) => None,
    };
    Ok(render::section(&record.header.id, &listed, selected.as_ref(), links))
}
