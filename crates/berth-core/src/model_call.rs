//! A `model/call`'s figures for people, one line: the inspector's timeline and
//! `berth sessions cat --transcript` read a model call the same way.

use serde_json::Value;

/// `gpt-4o (openai) · 1200 in / 80 out / 1000 cached · 850.5 ms · error rate_limited`,
/// each part only when the call gave it; never the prompt (a `model/call` holds none).
pub fn summary(data: &Value) -> String {
    let text = |field: &str| data.get(field).and_then(Value::as_str);
    let mut parts = vec![match (text("model"), text("provider")) {
        (Some(model), Some(provider)) => format!("{model} ({provider})"),
        (model, _) => model.unwrap_or("unknown").to_owned(),
    }];
    let tokens: Vec<String> = [("input_tokens", "in"), ("output_tokens", "out"), ("cached_tokens", "cached")]
        .into_iter()
        .filter_map(|(field, label)| data.get(field).and_then(Value::as_u64).map(|count| format!("{count} {label}")))
        .collect();
    if !tokens.is_empty() {
        parts.push(tokens.join(" / "));
    }
    if let Some(latency_ms) = data.get("latency_ms").and_then(Value::as_f64) {
        parts.push(format!("{latency_ms} ms"));
    }
    if let Some(error) = data.get("error").filter(|error| !error.is_null()) {
        parts.push(format!("error {}", error.get("code").and_then(Value::as_str).unwrap_or("?")));
    }
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::summary;
    use serde_json::json;

    #[test]
    fn a_model_call_reads_as_one_line() {
        let call = json!({"model": "gpt-4o", "provider": "openai", "input_tokens": 1200, "output_tokens": 80,
            "cached_tokens": 1000, "latency_ms": 850.5, "error": {"code": "rate_limited", "name": "RateLimitError"}});
        assert_eq!(summary(&call), "gpt-4o (openai) · 1200 in / 80 out / 1000 cached · 850.5 ms · error rate_limited");
        assert_eq!(summary(&json!({"model": "m", "error": null, "input_tokens": null})), "m");
    }
}
