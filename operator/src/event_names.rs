//! Events about objects whose names are too long for kube's Recorder.
//!
//! kube-runtime's `Recorder` names an Event `{object name}.{nanoseconds
//! as hex}`; past [`RECORDER_NAME_MAX`] characters that exceeds the 253 an
//! object name may have, the API server refuses the Event, and the object
//! gets none. For those objects p4fleet creates the Event itself (without
//! the Recorder's series aggregation), named by [`event_name`]: a prefix of
//! the object's name, a hash of the whole name and the time.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use sha2::{Digest, Sha256};

/// Longest object name whose Recorder-made Event name is valid: 253 minus
/// the dot and up to 16 hex digits.
pub const RECORDER_NAME_MAX: usize = 253 - 17;

/// Characters of the object's name an Event name keeps.
const PREFIX: usize = 200;

/// A valid Event name (DNS subdomain, at most 253 characters) for an
/// object named `object` (itself a DNS subdomain) at `nanos`.
pub fn event_name(object: &str, nanos: u128) -> String {
    let mut end = object.len().min(PREFIX);
    while !object.is_char_boundary(end) {
        end -= 1;
    }
    // A subdomain ends alphanumeric: cut back to the last such character.
    let prefix = object[..end].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    let hash = hex::encode(&Sha256::digest(object.as_bytes())[..4]);
    let name = format!("{prefix}.{hash}.{nanos:x}");
    name.trim_start_matches('.').to_string()
}

/// Creates `ev` about `reference` under an [`event_name`].
pub async fn publish(
    client: &kube::Client,
    reporter: &Reporter,
    ev: &Event,
    reference: &ObjectReference,
) -> Result<(), kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let name = event_name(
        reference.name.as_deref().unwrap_or_default(),
        now.as_nanosecond().max(0) as u128,
    );
    let ns = reference
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let event = K8sEvent {
        action: Some(ev.action.clone()),
        reason: Some(ev.reason.clone()),
        event_time: Some(MicroTime(now)),
        regarding: Some(reference.clone()),
        note: ev.note.clone(),
        metadata: ObjectMeta {
            namespace: Some(ns.clone()),
            name: Some(name),
            ..Default::default()
        },
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        type_: Some(
            match ev.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        ..Default::default()
    };
    Api::<K8sEvent>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid_subdomain(s: &str) -> bool {
        s.len() <= 253
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    }

    #[test]
    fn event_names_are_valid_for_names_of_any_length() {
        let nanos = 0x1874_3a2b_9c00_0000u128;
        for len in [1usize, 63, 199, 200, 201, 236, 237, 253] {
            // Labels of 50 characters with dashes and dots in between.
            let name: String = (0..len)
                .map(|i| match i % 51 {
                    50 => '.',
                    25 => '-',
                    _ => (b'a' + (i % 26) as u8) as char,
                })
                .collect::<String>()
                .trim_end_matches(['.', '-'])
                .to_string();
            let e = event_name(&name, nanos);
            assert!(valid_subdomain(&e), "{len}: {e}");
        }
        // Names that differ after the prefix get different Events.
        let a = format!("{}a", "x".repeat(240));
        let b = format!("{}b", "x".repeat(240));
        assert_ne!(event_name(&a, 1), event_name(&b, 1));
    }
}
