//! The extern functions the emulated DPDK target implements: AES-128-CBC
//! encryption and decryption of the packet payload (the bytes behind the
//! parsed headers, whole 16-byte blocks, in place: the packet keeps its
//! size, as with a cipher-only DPDK crypto op over a data range) and an
//! empty extern that only measures the cost of calling one.

use aes::cipher::{
    BlockDecryptMut, BlockEncryptMut, InnerIvInit, KeyInit, block_padding::NoPadding,
};
use aes::{Aes128Dec, Aes128Enc};

/// What an extern does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExternKind {
    /// AES-128-CBC encrypt the payload.
    Encrypt,
    /// AES-128-CBC decrypt the payload.
    Decrypt,
    /// Nothing (overhead measurements).
    Empty,
}

impl ExternKind {
    /// The implementation of an extern function name; `None` = the target
    /// has none.
    pub fn from_name(name: &str) -> Option<ExternKind> {
        match name {
            "async_encrypt" | "encrypt" => Some(ExternKind::Encrypt),
            "async_decrypt" | "decrypt" => Some(ExternKind::Decrypt),
            "empty" | "async_empty" => Some(ExternKind::Empty),
            _ => None,
        }
    }

    /// Name reported in capabilities.
    pub fn as_str(self) -> &'static str {
        match self {
            ExternKind::Encrypt => "aes128-cbc-encrypt",
            ExternKind::Decrypt => "aes128-cbc-decrypt",
            ExternKind::Empty => "empty",
        }
    }
}

/// Key and IV of the crypto externs (one per target; a real deployment
/// would provision them per security association).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CryptoKeys {
    pub key: [u8; 16],
    pub iv: [u8; 16],
}

impl Default for CryptoKeys {
    fn default() -> Self {
        CryptoKeys {
            key: *b"p4fleet-l2crypt!",
            iv: *b"t4p4s-async-ext!",
        }
    }
}

/// A ready-to-call extern (key schedules expanded once).
#[derive(Clone)]
pub enum ExternFn {
    Encrypt { cipher: Aes128Enc, iv: [u8; 16] },
    Decrypt { cipher: Aes128Dec, iv: [u8; 16] },
    Empty,
}

impl ExternFn {
    pub fn new(kind: ExternKind, keys: &CryptoKeys) -> ExternFn {
        match kind {
            ExternKind::Encrypt => ExternFn::Encrypt {
                cipher: Aes128Enc::new(&keys.key.into()),
                iv: keys.iv,
            },
            ExternKind::Decrypt => ExternFn::Decrypt {
                cipher: Aes128Dec::new(&keys.key.into()),
                iv: keys.iv,
            },
            ExternKind::Empty => ExternFn::Empty,
        }
    }

    /// Runs the extern over `payload` (whole blocks; a tail shorter than
    /// 16 bytes is left as is).
    #[inline]
    pub fn call(&self, payload: &mut [u8]) {
        let n = payload.len() & !15;
        match self {
            ExternFn::Encrypt { cipher, iv } => {
                let c = cbc::Encryptor::<Aes128Enc>::inner_iv_init(cipher.clone(), iv.into());
                let _ = c.encrypt_padded_mut::<NoPadding>(&mut payload[..n], n);
            }
            ExternFn::Decrypt { cipher, iv } => {
                let c = cbc::Decryptor::<Aes128Dec>::inner_iv_init(cipher.clone(), iv.into());
                let _ = c.decrypt_padded_mut::<NoPadding>(&mut payload[..n]);
            }
            ExternFn::Empty => {
                std::hint::black_box(payload);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::KeyIvInit;

    #[test]
    fn names() {
        assert_eq!(
            ExternKind::from_name("async_encrypt"),
            Some(ExternKind::Encrypt)
        );
        assert_eq!(
            ExternKind::from_name("async_decrypt"),
            Some(ExternKind::Decrypt)
        );
        assert_eq!(ExternKind::from_name("empty"), Some(ExternKind::Empty));
        assert_eq!(ExternKind::from_name("compress"), None);
    }

    #[test]
    fn encrypt_matches_aes_cbc_and_decrypt_restores() {
        let keys = CryptoKeys::default();
        let orig: Vec<u8> = (0..37u8).collect();
        let mut buf = orig.clone();
        ExternFn::new(ExternKind::Encrypt, &keys).call(&mut buf);
        // Reference: the same two blocks through cbc's own key/iv API.
        let mut want = orig[..32].to_vec();
        let _ = cbc::Encryptor::<aes::Aes128>::new(&keys.key.into(), &keys.iv.into())
            .encrypt_padded_mut::<NoPadding>(&mut want, 32)
            .unwrap();
        assert_eq!(&buf[..32], &want[..]);
        assert_eq!(&buf[32..], &orig[32..], "the tail is not a whole block");
        ExternFn::new(ExternKind::Decrypt, &keys).call(&mut buf);
        assert_eq!(buf, orig);
        // Known answer: FIPS-197 key 000102..0f on plaintext 00112233..ff
        // with a zero IV (CBC's first block is then plain AES).
        let k = CryptoKeys {
            key: std::array::from_fn(|i| i as u8),
            iv: [0; 16],
        };
        let mut b: Vec<u8> = (0..16).map(|i| (i * 0x11) as u8).collect();
        ExternFn::new(ExternKind::Encrypt, &k).call(&mut b);
        assert_eq!(
            b,
            [
                0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b, 0x04, 0x30, 0xd8, 0xcd, 0xb7, 0x80, 0x70, 0xb4,
                0xc5, 0x5a
            ]
        );
    }

    #[test]
    fn empty_changes_nothing() {
        let mut b = [1u8, 2, 3];
        ExternFn::new(ExternKind::Empty, &CryptoKeys::default()).call(&mut b);
        assert_eq!(b, [1, 2, 3]);
    }
}
