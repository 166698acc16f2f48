//! Label and field selectors from list and watch queries, matched against an object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_store::{FieldSelector, LabelSelector};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let object = serde_json::json!({"metadata": {"name": "web", "namespace": "team",
        "labels": {"app": "web", "tier": "1", "example.com/x": ""}}, "spec": {"nodeName": "n1"}});
    if let Ok(s) = LabelSelector::parse(text) {
        let _ = s.matches(&object);
    }
    if let Ok(s) = FieldSelector::parse(text) {
        let _ = s.matches(&object);
    }
});
