//! Resource quantities from a tenant's pod spec (`resources.limits`), as the node reads
//! them into cgroup limits: never a panic or an overflow; a value that parses is the same
//! with an explicit `+` sign, and its negation is its negative.
#![no_main]

use libfuzzer_sys::fuzz_target;
use podpass_api::quantity::parse_milli;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(v) = parse_milli(text)
        && !text.starts_with(['+', '-'])
    {
        assert_eq!(parse_milli(&format!("+{text}")), Ok(v), "{text:?}");
        assert_eq!(parse_milli(&format!("-{text}")).map(|n| -n), Ok(v), "{text:?}");
    }
});
