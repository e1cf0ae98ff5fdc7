//! Fault-injecting file layer (filled in by the JSONL work).
