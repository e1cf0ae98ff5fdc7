//! The embedded JSONL backend (R-J1…R-J5).
