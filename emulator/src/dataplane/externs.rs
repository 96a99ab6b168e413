//! The extern functions the emulated DPDK target implements, as DPDK SWX
//! runs extern functions: each call sees only its *mailbox*, two 64-bit
//! words `w0`, `w1` that the program moves values into and out of (`mov
//! f.async_encrypt.w0 h.payload.w0`), never the packet. The crypto externs
//! encrypt or decrypt the one AES block the mailbox holds (AES-128-CBC of
//! one block: AES of the block XOR the IV; `w0` is the block's first 8
//! bytes as a big-endian number, as `mov` from a header field leaves
//! them), byte for byte what p4fleet-dpdk-agent's externs compute; the
//! empty extern only measures the cost of calling one.

use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use aes::{Aes128Dec, Aes128Enc};

/// An extern call's mailbox: `w0`, `w1` (the agent's mailbox struct also
/// has `p4fleet_state`, its own bookkeeping, which a program never sees
/// change).
pub type Mailbox = [u64; 2];

/// What an extern does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExternKind {
    /// AES-128-CBC encrypt the mailbox's block.
    Encrypt,
    /// AES-128-CBC decrypt the mailbox's block.
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

    /// Runs the extern over one call's mailbox (in place).
    #[inline]
    pub fn call(&self, mb: &mut Mailbox) {
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&mb[0].to_be_bytes());
        block[8..].copy_from_slice(&mb[1].to_be_bytes());
        match self {
            ExternFn::Encrypt { cipher, iv } => {
                for (b, v) in block.iter_mut().zip(iv) {
                    *b ^= v;
                }
                cipher.encrypt_block((&mut block).into());
            }
            ExternFn::Decrypt { cipher, iv } => {
                cipher.decrypt_block((&mut block).into());
                for (b, v) in block.iter_mut().zip(iv) {
                    *b ^= v;
                }
            }
            ExternFn::Empty => {
                std::hint::black_box(mb);
                return;
            }
        }
        mb[0] = u64::from_be_bytes(block[..8].try_into().expect("8 bytes"));
        mb[1] = u64::from_be_bytes(block[8..].try_into().expect("8 bytes"));
    }

    /// Runs the extern over 16 bytes in wire order, as a program that
    /// moves them from a header into the mailbox and back sees it (tests).
    pub fn call_block(&self, block: &mut [u8; 16]) {
        let mut mb = [
            u64::from_be_bytes(block[..8].try_into().expect("8 bytes")),
            u64::from_be_bytes(block[8..].try_into().expect("8 bytes")),
        ];
        self.call(&mut mb);
        block[..8].copy_from_slice(&mb[0].to_be_bytes());
        block[8..].copy_from_slice(&mb[1].to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::{BlockEncryptMut, KeyIvInit, block_padding::NoPadding};

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
    fn encrypt_is_one_aes_cbc_block_and_decrypt_restores() {
        let keys = CryptoKeys::default();
        let orig: [u8; 16] = std::array::from_fn(|i| i as u8 * 3 + 1);
        let mut b = orig;
        ExternFn::new(ExternKind::Encrypt, &keys).call_block(&mut b);
        // Reference: the same block through cbc's own key/iv API.
        let mut want = orig;
        let _ = cbc::Encryptor::<aes::Aes128>::new(&keys.key.into(), &keys.iv.into())
            .encrypt_padded_mut::<NoPadding>(&mut want, 16)
            .unwrap();
        assert_eq!(b, want);
        // The mailbox words are the block's halves, big-endian.
        let mut mb = [
            u64::from_be_bytes(orig[..8].try_into().unwrap()),
            u64::from_be_bytes(orig[8..].try_into().unwrap()),
        ];
        ExternFn::new(ExternKind::Encrypt, &keys).call(&mut mb);
        assert_eq!(mb[0].to_be_bytes(), want[..8]);
        assert_eq!(mb[1].to_be_bytes(), want[8..]);
        ExternFn::new(ExternKind::Decrypt, &keys).call_block(&mut b);
        assert_eq!(b, orig);
        // Known answer: FIPS-197 key 000102..0f on plaintext 00112233..ff
        // with a zero IV (CBC's first block is then plain AES).
        let k = CryptoKeys {
            key: std::array::from_fn(|i| i as u8),
            iv: [0; 16],
        };
        let mut b: [u8; 16] = std::array::from_fn(|i| (i * 0x11) as u8);
        ExternFn::new(ExternKind::Encrypt, &k).call_block(&mut b);
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
        let mut mb = [1u64, 2];
        ExternFn::new(ExternKind::Empty, &CryptoKeys::default()).call(&mut mb);
        assert_eq!(mb, [1, 2]);
    }
}
