//! The TLS Secrets Switches refer to (`spec.tlsSecretRef`): `ca.crt`, and
//! `tls.crt` with `tls.key` for mutual TLS.
//!
//! Each referenced Secret gets its own watch, limited to that one object
//! by a field selector (`metadata.name=NAME` in its namespace). So the
//! operator never lists or watches any other Secret, and RBAC can grant
//! exactly that: `get`/`list`/`watch` on `secrets` in the namespaces that
//! hold switch credentials, optionally with `resourceNames` (the API
//! server authorizes a list or watch with a `metadata.name` field selector
//! as a request for that name). A label (`p4fleet.dev/tls`) would also
//! keep the operator from reading other Secrets, but RBAC cannot restrict
//! by label, so the role would still have to allow listing every Secret.
//!
//! Every change of a Secret (new, rotated, deleted, unreadable) is told to
//! the device pool as a change of the Switches using it: they reconcile,
//! and a connection whose TLS material changed is replaced by one with
//! the new material (no operator restart). Watches of Secrets no Switch
//! uses any more are stopped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use p4fleet_client::{TlsFile, TlsSettings};
use p4fleet_crds::switch::Switch;
use tokio::sync::{broadcast, watch};

/// Keys of a switch TLS Secret.
pub const CA_KEY: &str = "ca.crt";
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";

/// Why a Switch's TLS Secret cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretProblem {
    /// Not read yet (the watch has not answered).
    Pending,
    NotFound,
    /// The operator may not read it (RBAC); the API server's message.
    Forbidden(String),
    /// A required key is absent.
    MissingKey(&'static str),
    /// A key does not hold what it should.
    InvalidKey {
        key: &'static str,
        reason: String,
    },
}

/// A [`SecretProblem`] of one Secret (`namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct TlsSecretError {
    pub secret: String,
    pub problem: SecretProblem,
}

impl TlsSecretError {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self.problem {
            SecretProblem::Pending => "TlsSecretPending",
            SecretProblem::NotFound => "TlsSecretNotFound",
            SecretProblem::Forbidden(_) => "TlsSecretForbidden",
            SecretProblem::MissingKey(_) => "TlsSecretKeyMissing",
            SecretProblem::InvalidKey { .. } => "TlsSecretKeyInvalid",
        }
    }

    fn describe(&self) -> String {
        let s = &self.secret;
        match &self.problem {
            SecretProblem::Pending => format!("TLS Secret {s} has not been read yet"),
            SecretProblem::NotFound => format!("TLS Secret {s} does not exist"),
            SecretProblem::Forbidden(m) => {
                format!("TLS Secret {s} may not be read (get/list/watch secrets): {m}")
            }
            SecretProblem::MissingKey(k) => format!("TLS Secret {s} has no key {k}"),
            SecretProblem::InvalidKey { key, reason } => {
                format!("TLS Secret {s}, key {key}: {reason}")
            }
        }
    }
}

/// The TLS settings in a Secret (pure): `ca.crt` required, `tls.crt` and
/// `tls.key` both or neither, each parsed as PEM.
pub fn settings_from(secret: &Secret) -> Result<TlsSettings, SecretProblem> {
    let empty = BTreeMap::new();
    let data = secret.data.as_ref().unwrap_or(&empty);
    let get = |k: &str| data.get(k).map(|v| v.0.clone());
    let ca_pem = get(CA_KEY).ok_or(SecretProblem::MissingKey(CA_KEY))?;
    let (cert_pem, key_pem) = match (get(CERT_KEY), get(KEY_KEY)) {
        (Some(c), Some(k)) => (c, k),
        (None, None) => (Vec::new(), Vec::new()),
        (Some(_), None) => return Err(SecretProblem::MissingKey(KEY_KEY)),
        (None, Some(_)) => return Err(SecretProblem::MissingKey(CERT_KEY)),
    };
    let tls = TlsSettings {
        ca_pem,
        cert_pem,
        key_pem,
    };
    tls.check().map_err(|e| SecretProblem::InvalidKey {
        key: match e.file {
            TlsFile::Ca => CA_KEY,
            TlsFile::Cert => CERT_KEY,
            TlsFile::Key => KEY_KEY,
        },
        reason: e.reason,
    })?;
    Ok(tls)
}

/// `namespace/name` of a Switch's TLS Secret, if it has one.
pub fn secret_of(sw: &Switch) -> Option<(String, String)> {
    let r = sw.spec.tls_secret_ref.as_ref()?;
    Some((r.namespace.clone(), r.name.clone()))
}

type Key = (String, String);
type Value = Result<TlsSettings, SecretProblem>;

struct Watched {
    value: watch::Receiver<Value>,
    users: HashSet<String>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watched TLS Secrets and the Switches using each.
#[derive(Default)]
pub struct TlsSecrets {
    watched: Mutex<HashMap<Key, Watched>>,
    /// Which Secret each Switch uses.
    used_by: Mutex<HashMap<String, Key>>,
}

impl TlsSecrets {
    /// The TLS settings of a Switch: `Ok(None)` for plaintext, the
    /// Secret's problem while it cannot be used.
    pub fn settings(&self, sw: &Switch) -> Result<Option<TlsSettings>, TlsSecretError> {
        let Some(key) = secret_of(sw) else {
            return Ok(None);
        };
        let watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        let value = match watched.get(&key) {
            Some(w) => w.value.borrow().clone(),
            None => Err(SecretProblem::Pending),
        };
        value.map(Some).map_err(|problem| TlsSecretError {
            secret: format!("{}/{}", key.0, key.1),
            problem,
        })
    }

    /// Makes sure the Secret of `sw` is watched (and no other Secret for
    /// it), then waits up to `timeout` for its first read. Changes are
    /// sent as the names of the Switches using it on `changes`.
    pub async fn track(
        self: &Arc<Self>,
        client: &kube::Client,
        sw: &Switch,
        changes: &broadcast::Sender<String>,
        timeout: std::time::Duration,
    ) {
        let name = sw.name_any();
        let Some(key) = secret_of(sw) else {
            self.untrack(&name);
            return;
        };
        let mut value = {
            let mut used_by = self.used_by.lock().unwrap_or_else(|e| e.into_inner());
            let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(old) = used_by.insert(name.clone(), key.clone())
                && old != key
            {
                release(&mut watched, &old, &name);
            }
            let w = watched.entry(key.clone()).or_insert_with(|| {
                let (tx, rx) = watch::channel(Err(SecretProblem::Pending));
                let task = tokio::spawn(watch_secret(
                    client.clone(),
                    key.clone(),
                    tx,
                    Arc::downgrade(self),
                    changes.clone(),
                ));
                Watched {
                    value: rx,
                    users: HashSet::new(),
                    task,
                }
            });
            w.users.insert(name);
            w.value.clone()
        };
        let _ = tokio::time::timeout(
            timeout,
            value.wait_for(|v| !matches!(v, Err(SecretProblem::Pending))),
        )
        .await;
    }

    /// The Switch `name` no longer uses a Secret (deleted, or its
    /// `tlsSecretRef` removed).
    pub fn untrack(&self, name: &str) {
        let mut used_by = self.used_by.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = used_by.remove(name) {
            let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
            release(&mut watched, &old, name);
        }
    }

    /// Secrets watched now (`namespace/name`), sorted.
    pub fn watched(&self) -> Vec<String> {
        let watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<String> = watched.keys().map(|(n, s)| format!("{n}/{s}")).collect();
        v.sort();
        v
    }
}

/// Drops `user` from the Secret `key`; its watch stops with its last user.
fn release(watched: &mut HashMap<Key, Watched>, key: &Key, user: &str) {
    if let Some(w) = watched.get_mut(key) {
        w.users.remove(user);
        if w.users.is_empty() {
            watched.remove(key);
        }
    }
}

/// Watches one Secret (field selector on its name) and publishes its TLS
/// settings or problem; every change is sent on `changes` as the names of
/// the Switches that use it at that time.
async fn watch_secret(
    client: kube::Client,
    (ns, name): Key,
    value: watch::Sender<Value>,
    secrets: std::sync::Weak<TlsSecrets>,
    changes: broadcast::Sender<String>,
) {
    let api: Api<Secret> = Api::namespaced(client, &ns);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(api, cfg).default_backoff());
    let mut seen = false;
    let secret = format!("{ns}/{name}");
    while let Some(ev) = events.next().await {
        let next = match ev {
            Ok(watcher::Event::Init) => {
                seen = false;
                continue;
            }
            Ok(watcher::Event::InitApply(s) | watcher::Event::Apply(s)) => {
                seen = true;
                settings_from(&s)
            }
            Ok(watcher::Event::InitDone) if seen => continue,
            Ok(watcher::Event::InitDone | watcher::Event::Delete(_)) => {
                Err(SecretProblem::NotFound)
            }
            Err(e) => match forbidden(&e) {
                Some(msg) => Err(SecretProblem::Forbidden(msg)),
                None => {
                    tracing::warn!(%secret, error = %e, "watching TLS Secret");
                    continue;
                }
            },
        };
        if *value.borrow() != next {
            match &next {
                Ok(_) => tracing::info!(%secret, "TLS Secret loaded"),
                Err(p) => tracing::warn!(%secret, problem = ?p, "TLS Secret unusable"),
            }
            let _ = value.send_replace(next);
            let Some(secrets) = secrets.upgrade() else {
                return;
            };
            for sw in secrets.users_of(&ns, &name) {
                let _ = changes.send(sw);
            }
        }
    }
}

impl TlsSecrets {
    /// The Switches using Secret `ns/name`, sorted.
    pub fn users_of(&self, ns: &str, name: &str) -> Vec<String> {
        let used_by = self.used_by.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<String> = used_by
            .iter()
            .filter(|(_, (n, s))| n == ns && s == name)
            .map(|(sw, _)| sw.clone())
            .collect();
        v.sort();
        v
    }
}

/// The API server's message if `e` is a refusal by RBAC (403).
fn forbidden(e: &watcher::Error) -> Option<String> {
    let api = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s,
        watcher::Error::WatchError(s) => s,
        _ => return None,
    };
    (api.code == 403).then(|| api.message.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(pairs: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    const CERT: &[u8] = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    const KEY: &[u8] = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";

    #[test]
    fn secrets_name_the_key_at_fault() {
        assert_eq!(
            settings_from(&Secret::default()),
            Err(SecretProblem::MissingKey(CA_KEY))
        );
        let only_ca = settings_from(&secret(&[(CA_KEY, CERT)])).unwrap();
        assert!(!only_ca.is_mutual());
        let full = settings_from(&secret(&[(CA_KEY, CERT), (CERT_KEY, CERT), (KEY_KEY, KEY)]));
        assert!(full.unwrap().is_mutual());
        assert_eq!(
            settings_from(&secret(&[(CA_KEY, CERT), (CERT_KEY, CERT)])),
            Err(SecretProblem::MissingKey(KEY_KEY))
        );
        assert_eq!(
            settings_from(&secret(&[(CA_KEY, CERT), (KEY_KEY, KEY)])),
            Err(SecretProblem::MissingKey(CERT_KEY))
        );
        let bad = settings_from(&secret(&[
            (CA_KEY, CERT),
            (CERT_KEY, CERT),
            (KEY_KEY, CERT),
        ]));
        assert!(
            matches!(&bad, Err(SecretProblem::InvalidKey { key: KEY_KEY, .. })),
            "{bad:?}"
        );
        let bad = settings_from(&secret(&[(CA_KEY, b"not pem")]));
        assert!(matches!(
            &bad,
            Err(SecretProblem::InvalidKey { key: CA_KEY, .. })
        ));
        let e = TlsSecretError {
            secret: "ns/sw-tls".into(),
            problem: SecretProblem::MissingKey(KEY_KEY),
        };
        assert_eq!(e.reason(), "TlsSecretKeyMissing");
        assert_eq!(e.to_string(), "TLS Secret ns/sw-tls has no key tls.key");
    }
}
