//! Fuzzes the strict validating minifier (R-C9): it must never panic; what it accepts it
//! returns no longer than the input, minifying its output changes nothing, and serde_json
//! reads the output as it reads the input (both refuse only numbers beyond `f64`).
#![no_main]

use berth_core::json::minify_strict;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(minimal) = minify_strict(bytes) else { return };
    assert!(minimal.len() <= bytes.len());
    assert_eq!(minify_strict(minimal.as_bytes()).ok().as_deref(), Some(minimal.as_str()));
    let parse = |text: &[u8]| {
        let mut deserializer = serde_json::Deserializer::from_slice(text);
        deserializer.disable_recursion_limit();
        serde::Deserialize::deserialize(&mut deserializer).map(|value: serde_json::Value| value)
    };
    match (parse(bytes), parse(minimal.as_bytes())) {
        (Ok(input), Ok(output)) => assert_eq!(input, output),
        (Err(input), Err(output)) => {
            assert!(input.to_string().contains("out of range") && output.to_string().contains("out of range"));
        }
        (input, output) => panic!("serde_json read {input:?} and {output:?}"),
    }
});
