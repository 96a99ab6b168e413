//! Test certificates made at test time with rcgen (no keys in the
//! repository): a CA, device (server) certificates for chosen names,
//! expired ones, and client certificates.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    date_time_ymd,
};

/// A PEM certificate and its PEM private key.
#[derive(Clone, Debug)]
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A certificate authority that signs device and client certificates.
pub struct TestCa {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// How a leaf certificate should be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    Current,
    /// Valid 2000-01-01 to 2001-01-01.
    Expired,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("self-signed CA");
        TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn leaf(&self, names: &[&str], eku: ExtendedKeyUsagePurpose, validity: Validity) -> Pair {
        let key = KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params
            .distinguished_name
            .push(DnType::CommonName, "p4fleet test");
        params.extended_key_usages = vec![eku];
        if validity == Validity::Expired {
            params.not_before = date_time_ymd(2000, 1, 1);
            params.not_after = date_time_ymd(2001, 1, 1);
        }
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A device (server) certificate naming `names` (DNS names or IPs).
    pub fn server(&self, names: &[&str], validity: Validity) -> Pair {
        self.leaf(names, ExtendedKeyUsagePurpose::ServerAuth, validity)
    }

    /// A client certificate (the operator's).
    pub fn client(&self) -> Pair {
        self.leaf(
            &["p4fleet-operator"],
            ExtendedKeyUsagePurpose::ClientAuth,
            Validity::Current,
        )
    }
}
