//! Mutual TLS to devices: the channel's TLS settings from PEM material,
//! checked before any I/O, and which TLS failure ended a connection
//! attempt. Failures are told apart by rustls's error variants (tonic's
//! TLS is tokio-rustls with the ring provider the operator installs),
//! never by message text.

use std::fmt;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::TlsSettings;

/// One piece of the TLS material of a [`TlsSettings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsFile {
    /// The CA certificate(s) the device's certificate must chain to.
    Ca,
    /// This client's certificate chain.
    Cert,
    /// This client's private key.
    Key,
}

impl fmt::Display for TlsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFile::Ca => "CA certificate",
            TlsFile::Cert => "client certificate",
            TlsFile::Key => "client key",
        })
    }
}

/// TLS material that cannot be used, and which piece.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {reason}")]
pub struct TlsMaterialError {
    pub file: TlsFile,
    pub reason: String,
}

impl TlsSettings {
    /// Checks that the CA holds at least one PEM certificate, and that the
    /// client certificate and key are both given (mutual TLS) or both
    /// empty (server authentication only) and parse as PEM.
    pub fn check(&self) -> Result<(), TlsMaterialError> {
        let bad = |file, reason: String| TlsMaterialError { file, reason };
        certificates(&self.ca_pem).map_err(|r| bad(TlsFile::Ca, r))?;
        match (self.cert_pem.is_empty(), self.key_pem.is_empty()) {
            (true, true) => Ok(()),
            (false, true) => Err(bad(
                TlsFile::Key,
                "missing (a client certificate needs its key)".into(),
            )),
            (true, false) => Err(bad(
                TlsFile::Cert,
                "missing (a client key needs its certificate)".into(),
            )),
            (false, false) => {
                certificates(&self.cert_pem).map_err(|r| bad(TlsFile::Cert, r))?;
                PrivateKeyDer::from_pem_slice(&self.key_pem)
                    .map(drop)
                    .map_err(|e| bad(TlsFile::Key, pem_reason(e)))
            }
        }
    }

    /// Whether a client certificate is presented (mutual TLS).
    pub fn is_mutual(&self) -> bool {
        !self.cert_pem.is_empty()
    }
}

fn certificates(pem: &[u8]) -> Result<usize, String> {
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(pem) {
        c.map_err(pem_reason)?;
        n += 1;
    }
    if n == 0 {
        return Err(pem_reason(rustls::pki_types::pem::Error::NoItemsFound));
    }
    Ok(n)
}

fn pem_reason(e: rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::NoItemsFound => "no PEM block of the expected type".into(),
        E::Base64Decode(_) => "PEM block is not valid base64".into(),
        E::MissingSectionEnd { .. } => "PEM block has no END line".into(),
        E::IllegalSectionStart { .. } => "PEM block has a malformed BEGIN line".into(),
        other => other.to_string(),
    }
}

/// The channel's TLS: trust only `ca`, present the client certificate if
/// any, and expect the device's certificate to name `server_name` (the
/// endpoint's host: a DNS name or an IP address SAN).
pub(crate) fn client_config(tls: &TlsSettings, server_name: &str) -> ClientTlsConfig {
    let mut cfg = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&tls.ca_pem))
        .domain_name(server_name);
    if tls.is_mutual() {
        cfg = cfg.identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem));
    }
    cfg
}

/// Why a TLS connection to a device failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsFailure {
    /// The device's certificate does not chain to the CA we trust.
    UnknownCa,
    /// The device's certificate has expired.
    Expired,
    /// The device's certificate is not valid yet.
    NotYetValid,
    /// The device's certificate does not name the host we dialed.
    WrongName,
    /// The device's certificate is unusable otherwise (bad signature,
    /// purpose, encoding, revoked).
    BadDeviceCertificate,
    /// The device requires a client certificate and none was presented.
    ClientCertificateRequired,
    /// The device refused the client certificate presented.
    ClientCertificateRejected,
    /// Any other handshake failure (no common version or cipher, not TLS).
    Handshake,
}

impl TlsFailure {
    /// A condition reason (CamelCase) for this failure.
    pub fn reason(self) -> &'static str {
        match self {
            TlsFailure::UnknownCa => "TlsUnknownCA",
            TlsFailure::Expired => "TlsCertificateExpired",
            TlsFailure::NotYetValid => "TlsCertificateNotYetValid",
            TlsFailure::WrongName => "TlsWrongServerName",
            TlsFailure::BadDeviceCertificate => "TlsBadDeviceCertificate",
            TlsFailure::ClientCertificateRequired => "TlsClientCertificateRequired",
            TlsFailure::ClientCertificateRejected => "TlsClientCertificateRejected",
            TlsFailure::Handshake => "TlsHandshakeFailed",
        }
    }
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFailure::UnknownCa => "the device's certificate is not signed by the trusted CA",
            TlsFailure::Expired => "the device's certificate has expired",
            TlsFailure::NotYetValid => "the device's certificate is not valid yet",
            TlsFailure::WrongName => "the device's certificate does not name the endpoint's host",
            TlsFailure::BadDeviceCertificate => "the device's certificate is unusable",
            TlsFailure::ClientCertificateRequired => {
                "the device requires a client certificate and none was presented"
            }
            TlsFailure::ClientCertificateRejected => "the device rejected the client certificate",
            TlsFailure::Handshake => "the TLS handshake failed",
        })
    }
}

/// The TLS failure somewhere in `err`'s source chain, with rustls's own
/// words for it. I/O errors are looked into: tokio-rustls wraps its
/// errors in `std::io::Error`, whose `source` skips the wrapped error.
pub fn tls_failure(err: &(dyn std::error::Error + 'static)) -> Option<(TlsFailure, String)> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(r) = rustls_error(e) {
            return Some((classify(r), r.to_string()));
        }
        if let Some(r) = alert_after_handshake(e) {
            return Some((classify(&r), r.to_string()));
        }
        next = e.source();
    }
    None
}

/// Alerts the device sends about our certificate once the handshake is
/// over on our side (TLS 1.3 checks client certificates after the
/// client's Finished), so they arrive on the first read of the HTTP/2
/// connection. h2 keeps only the kind and text of an I/O error, so the
/// rustls error is gone by then: its text is compared with rustls's own
/// rendering of each such alert (generated here, not a copied string).
fn alert_after_handshake(e: &(dyn std::error::Error + 'static)) -> Option<rustls::Error> {
    use rustls::AlertDescription as A;
    let io = e.downcast_ref::<std::io::Error>()?;
    if io.kind() != std::io::ErrorKind::InvalidData {
        return None;
    }
    let text = io
        .get_ref()
        .map(|i| i.to_string())
        .unwrap_or_else(|| io.to_string());
    [
        A::CertificateRequired,
        A::BadCertificate,
        A::UnsupportedCertificate,
        A::CertificateRevoked,
        A::CertificateExpired,
        A::CertificateUnknown,
        A::UnknownCA,
        A::AccessDenied,
    ]
    .into_iter()
    .map(rustls::Error::AlertReceived)
    .find(|r| text == r.to_string())
}

fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(r) = e.downcast_ref::<rustls::Error>() {
        return Some(r);
    }
    let io = e.downcast_ref::<std::io::Error>()?;
    io.get_ref()?.downcast_ref::<rustls::Error>()
}

/// rustls's verdict as a [`TlsFailure`]: certificate errors are about the
/// device's certificate (we verify it); alerts are the device's verdict
/// on ours.
pub fn classify(e: &rustls::Error) -> TlsFailure {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(c) => match c {
            C::UnknownIssuer => TlsFailure::UnknownCa,
            C::Expired | C::ExpiredContext { .. } => TlsFailure::Expired,
            C::NotValidYet | C::NotValidYetContext { .. } => TlsFailure::NotYetValid,
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsFailure::WrongName,
            _ => TlsFailure::BadDeviceCertificate,
        },
        E::AlertReceived(a) => match a {
            A::CertificateRequired => TlsFailure::ClientCertificateRequired,
            A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::AccessDenied => TlsFailure::ClientCertificateRejected,
            _ => TlsFailure::Handshake,
        },
        _ => TlsFailure::Handshake,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_is_checked_per_piece() {
        let ok_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let s = |ca: &str, cert: &str, key: &str| TlsSettings {
            ca_pem: ca.into(),
            cert_pem: cert.into(),
            key_pem: key.into(),
        };
        assert_eq!(s(ok_cert, "", "").check(), Ok(()));
        assert_eq!(s(ok_cert, ok_cert, key).check(), Ok(()));
        assert_eq!(s("", "", "").check().unwrap_err().file, TlsFile::Ca);
        assert_eq!(s("garbage", "", "").check().unwrap_err().file, TlsFile::Ca);
        assert_eq!(
            s(ok_cert, ok_cert, "").check().unwrap_err().file,
            TlsFile::Key
        );
        assert_eq!(s(ok_cert, "", key).check().unwrap_err().file, TlsFile::Cert);
        // A key where the certificate should be.
        assert_eq!(
            s(ok_cert, key, key).check().unwrap_err().file,
            TlsFile::Cert
        );
        let e = s(ok_cert, ok_cert, ok_cert).check().unwrap_err();
        assert_eq!(e.file, TlsFile::Key);
        assert!(e.to_string().starts_with("client key: "), "{e}");
    }

    #[test]
    fn rustls_errors_map_to_failures_through_io_errors() {
        use rustls::{AlertDescription as A, CertificateError as C, Error as E};
        let cases = [
            (
                E::InvalidCertificate(C::UnknownIssuer),
                TlsFailure::UnknownCa,
            ),
            (E::InvalidCertificate(C::Expired), TlsFailure::Expired),
            (
                E::InvalidCertificate(C::NotValidForName),
                TlsFailure::WrongName,
            ),
            (
                E::InvalidCertificate(C::NotValidYet),
                TlsFailure::NotYetValid,
            ),
            (
                E::InvalidCertificate(C::BadSignature),
                TlsFailure::BadDeviceCertificate,
            ),
            (
                E::AlertReceived(A::CertificateRequired),
                TlsFailure::ClientCertificateRequired,
            ),
            (
                E::AlertReceived(A::UnknownCA),
                TlsFailure::ClientCertificateRejected,
            ),
            (E::AlertReceived(A::HandshakeFailure), TlsFailure::Handshake),
        ];
        for (e, want) in cases {
            let io = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
            let status = tonic::Status::from_error(Box::new(io));
            assert_eq!(tls_failure(&status).map(|(f, _)| f), Some(want));
        }
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(tls_failure(&plain), None);
        // What h2 leaves of an alert read after the handshake: kind and text.
        let text = E::AlertReceived(A::CertificateRequired).to_string();
        let flat = std::io::Error::new(std::io::ErrorKind::InvalidData, text);
        assert_eq!(
            tls_failure(&flat).map(|(f, _)| f),
            Some(TlsFailure::ClientCertificateRequired)
        );
        let other = std::io::Error::new(std::io::ErrorKind::InvalidData, "frame too big");
        assert_eq!(tls_failure(&other), None);
    }
}
