//! Fuzzes the HTTP request decoder: the strict JSON body decoding every handler uses
//! (`decode_json`) into each request body type, and the conversion of a decoded body
//! into the service's request (`wire::*_from`). Never panics; a body that decodes
//! re-encodes to JSON that decodes to the same request (nothing is lost or invented on
//! the way in).
#![no_main]

use berth_api as body;
use berth_server::limits::decode_json;
use berth_server::wire;
use libfuzzer_sys::fuzz_target;
use serde::{de::DeserializeOwned, Serialize};

fn stable<B: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(bytes: &[u8]) -> Option<B> {
    let decoded: B = decode_json(bytes).ok()?;
    let again = serde_json::to_vec(&decoded).expect("a decoded body re-encodes");
    let round: B = decode_json(&again).expect("a re-encoded body decodes");
    assert_eq!(round, decoded);
    Some(decoded)
}

fuzz_target!(|bytes: &[u8]| {
    if let Some(decoded) = stable::<body::AppendBody>(bytes) {
        // A carried memory write with a bad namespace is refused here (typed, no panic).
        if let Ok(request) = wire::append_from(decoded) {
            let _ = wire::append(&request);
        }
    }
    if let Some(decoded) = stable::<body::PutMemoryBody>(bytes) {
        if let Ok(put) = wire::memory_put_from(decoded) {
            let _ = wire::memory_put(&put);
        }
    }
    if let Some(decoded) = stable::<body::MemorySearchBody>(bytes) {
        let _ = wire::memory_search_from(decoded);
    }
    if let Some(decoded) = stable::<body::CreateSessionBody>(bytes) {
        let request = wire::create_from(decoded);
        let _ = wire::create(&request);
    }
    if let Some(decoded) = stable::<body::AttachBody>(bytes) {
        let request = wire::attach_from(decoded);
        let _ = wire::attach(&request);
    }
    if let Some(decoded) = stable::<body::UpdateSessionBody>(bytes) {
        let update = wire::update_from(decoded);
        let _ = wire::update(&update);
    }
});
