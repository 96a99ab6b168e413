//! A revision read back from its snapshot (dereference: reads through
//! [`Reads`] only): the VirtualSwitch controller loads a program's
//! content from here when the user's sources no longer give it.

use p4fleet_crds::P4ProgramSpec;

use super::{Location, RestoreError, manifest, record_field, restore_source, revision_name};
use crate::artifacts::{Resolved, short_digest};
use crate::reads::Reads;

/// A revision's content, as recorded.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The ControllerRevision's name and number.
    pub name: String,
    pub revision: i64,
    /// The spec as recorded (FPGA resources, Tofino pipes).
    pub spec: P4ProgramSpec,
    /// The sources' bytes, exactly those of the digest.
    pub resolved: Resolved,
}

/// The content `digest` of P4Program `ns/program`, from its revision's
/// snapshot; `Ok(Err)` says why it cannot be had (never a guess: the bytes
/// are checked against each source's sha256 and the whole digest).
pub async fn load(
    reads: &impl Reads,
    ns: &str,
    program: &str,
    digest: &str,
) -> Result<Result<Restored, RestoreError>, kube::Error> {
    let name = revision_name(program, digest);
    let Some(cr) = reads.controller_revision(ns, &name).await? else {
        return Ok(Err(RestoreError::NotRecorded {
            program: program.into(),
            short: short_digest(digest),
        }));
    };
    let m = match manifest(&cr) {
        Ok(m) => m,
        Err(e) => return Ok(Err(e)),
    };
    let mut resolved = Resolved::default();
    // One read per snapshot ConfigMap, however many sources it holds.
    let mut parts = std::collections::BTreeMap::new();
    for rec in &m.sources {
        let field = match record_field(&name, rec) {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let bytes = match &rec.at {
            Location::Url(src) => match reads.artifact(ns, src).await? {
                Ok(b) => b,
                Err(error) => {
                    return Ok(Err(RestoreError::Url {
                        revision: name,
                        field: rec.field.clone(),
                        error: Box::new(error),
                    }));
                }
            },
            Location::ConfigMap { name: cm, .. } => {
                if !parts.contains_key(cm) {
                    parts.insert(cm.clone(), reads.config_map(ns, cm).await?);
                }
                let Some(found) = &parts[cm] else {
                    return Ok(Err(RestoreError::PartMissing {
                        revision: name,
                        config_map: cm.clone(),
                    }));
                };
                match restore_source(&name, rec, found) {
                    Ok(b) => b,
                    Err(e) => return Ok(Err(e)),
                }
            }
        };
        resolved.insert(field, Ok(bytes));
    }
    let got = resolved.digest();
    if got != digest || m.digest != digest {
        return Ok(Err(RestoreError::DigestMismatch {
            revision: name,
            want: digest.into(),
            got,
        }));
    }
    Ok(Ok(Restored {
        name,
        revision: cr.revision,
        spec: m.spec,
        resolved,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::field;
    use crate::fleet::revisions::{part_object, revision_object, snapshot};
    use crate::reads::fixture::Cluster;
    use p4fleet_crds::P4Program;

    const FIREWALL: &str = include_str!("../../../../examples/firewall/p4info.txt");

    fn program() -> P4Program {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "fw", "namespace": "ns", "uid": "u-1"},
            "spec": {"p4info": {"configMapKeyRef": {"name": "src", "key": "p4info.txt"}},
                     "artifacts": {"bmv2": {"json": {"inline": "{\"v\": 1}"}}}}
        }))
        .unwrap()
    }

    /// A cluster holding the revision of `p`'s content and its snapshot.
    fn recorded(p: &P4Program) -> (Cluster, String) {
        let resolved: Resolved = [
            (field::P4INFO, Ok(FIREWALL.as_bytes().to_vec())),
            (field::BMV2_JSON, Ok(b"{\"v\": 1}".to_vec())),
        ]
        .into_iter()
        .collect();
        let digest = resolved.digest();
        let name = revision_name("fw", &digest);
        let snap = snapshot(&name, &p.spec, &resolved).unwrap();
        let mut cr = revision_object(p, &name, 1, &snap.manifest);
        cr.metadata.namespace = Some("ns".into());
        let parts = snap
            .parts
            .iter()
            .map(|(n, d)| {
                let mut cm = part_object(p, n, d);
                cm.metadata.namespace = Some("ns".into());
                cm
            })
            .collect();
        let cluster = Cluster {
            config_maps: parts,
            revisions: vec![cr],
            ..Default::default()
        };
        (cluster, digest)
    }

    #[tokio::test]
    async fn a_revision_gives_back_its_bytes_without_the_users_sources() {
        let p = program();
        let (cluster, digest) = recorded(&p);
        // The user's ConfigMap `src` is not in the cluster at all.
        let r = load(&cluster, "ns", "fw", &digest).await.unwrap().unwrap();
        assert_eq!(r.revision, 1);
        assert_eq!(r.resolved.digest(), digest);
        assert_eq!(
            r.resolved.get(field::P4INFO),
            Some(&Ok(FIREWALL.as_bytes().to_vec()))
        );
        assert!(r.resolved.p4info().is_ok());

        let other = "f".repeat(64);
        assert!(matches!(
            load(&cluster, "ns", "fw", &other).await.unwrap(),
            Err(RestoreError::NotRecorded { .. })
        ));
        // A snapshot ConfigMap deleted behind the operator's back is named.
        let mut gone = recorded(&p).0;
        gone.config_maps.clear();
        let e = load(&gone, "ns", "fw", &digest).await.unwrap().unwrap_err();
        assert!(matches!(e, RestoreError::PartMissing { .. }), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("{}-0", revision_name("fw", &digest)))
        );
    }
}
