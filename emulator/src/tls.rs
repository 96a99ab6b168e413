//! TLS on the emulator's gRPC ports (P4Runtime and BFRT), as a switch's
//! gRPC server configured for it: a server certificate and key, and
//! optionally a client CA, which makes client certificates required
//! (mutual TLS). The provider is rustls's ring, like the operator's.

use std::path::Path;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::EmulatorError;

/// The emulator's TLS material (PEM).
#[derive(Debug, Clone, Default)]
pub struct ServerTls {
    /// Server certificate chain.
    pub cert_pem: Vec<u8>,
    /// Server private key.
    pub key_pem: Vec<u8>,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca_pem: Option<Vec<u8>>,
}

impl ServerTls {
    /// Reads the material from files (the `--tls-*` flags).
    pub fn from_files(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<ServerTls, EmulatorError> {
        let read = |p: &Path| {
            std::fs::read(p)
                .map_err(|e| EmulatorError::Tls(format!("reading {}: {e}", p.display())))
        };
        Ok(ServerTls {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            client_ca_pem: client_ca.map(read).transpose()?,
        })
    }

    /// tonic's server TLS settings: client certificates required when a
    /// client CA is given.
    pub(crate) fn config(&self) -> ServerTlsConfig {
        let cfg =
            ServerTlsConfig::new().identity(Identity::from_pem(&self.cert_pem, &self.key_pem));
        match &self.client_ca_pem {
            Some(ca) => cfg
                .client_ca_root(Certificate::from_pem(ca))
                .client_auth_optional(false),
            None => cfg,
        }
    }
}
