//! Target `config_toml`: arbitrary and mutated TOML into `NodeConfig::from_toml_str`, the
//! way `kvserver --config FILE` reads a file. Every input is either a configuration that
//! passes its own validation or one error line naming what was wrong; nothing panics.

use super::support;
use crate::config::{NodeConfig, Origin, Overrides};
use proptest::prelude::*;

const TARGET: &str = "config_toml";

/// Tokens worth splicing into TOML: section headers, numbers at and past every integer
/// type's edge, floats TOML allows, strings, dates, inline tables.
const DICTIONARY: &[&str] = &[
    "\n[limits]\n",
    "\n[[peers]]\n",
    "\n[election]\n",
    "\n[tls.client]\n",
    "\n[log]\n",
    "\n[compaction]\n",
    " = ",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "-1",
    "0",
    "1e309",
    "nan",
    "inf",
    "-0.0",
    "\"\"",
    "\"0.0.0.0:0\"",
    "\"[::]:2379\"",
    "1979-05-27T07:32:00Z",
    "{}",
    "[]",
    "'''",
    "\"\\u0000\"",
    "\"5m\"",
    "\"1h\"",
    "\"99999999999999999999h\"",
    "id = 0",
    "max_request_bytes = ",
    "retention = ",
];

/// One file's text through the loader.
pub fn check(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let origin = Origin::File("fuzz.toml".into());
    match NodeConfig::from_toml_str(&text, origin, &Overrides::default()) {
        Ok(config) => {
            config.validate().expect("a loaded configuration passes its own validation");
            // What the node derives from it at start must not panic either.
            let _ = (config.lease_config(), config.replica_config(), config.watch_settings(), config.members());
            let _ = (config.client_limits.grpc_message_limit(), config.client_limits.gateway_body_limit());
        }
        Err(error) => {
            let line = error.to_string();
            assert!(line.starts_with("fuzz.toml"), "the error names the file: {line}");
            assert!(line.len() > "fuzz.toml".len() + 2, "the error says what was wrong: {line}");
        }
    }
}

#[test]
fn corpus_and_mutations() {
    let seeds = support::replay(env!("CARGO_MANIFEST_DIR"), TARGET, check);
    proptest!(support::config(1000), |(bytes in support::mutated(seeds, DICTIONARY))| check(&bytes));
}

#[test]
fn arbitrary_text() {
    proptest!(support::config(500), |(text in "[\\[\\]a-z_=\"0-9.:\n #{},-]{0,200}")| check(text.as_bytes()));
}
