//! Bitstreams without Vivado: a deterministic synthetic generator shaped
//! like a 7 series raw bitstream, the check the emulated configuration
//! logic applies, and sha256. Pure.
//!
//! Real partial bitstreams come from the Xilinx flow (P4VBox: SDNet, then
//! Vivado partial reconfiguration, `write_bitstream -bin_file`); the
//! emulator only needs their size, their checksum and the sync word. The
//! synthetic layout is: dummy and bus-width words, the sync word
//! `0xAA995566`, a NOOP, pseudo-random configuration data seeded by a
//! name, then a DESYNC command and NOOPs, all 32-bit big-endian words.

use sha2::{Digest, Sha256};

/// The word the configuration logic synchronizes on (UG470).
pub const SYNC_WORD: u32 = 0xAA99_5566;

const HEAD: [u32; 7] = [
    0xFFFF_FFFF,
    0x0000_00BB, // bus width detection
    0x1122_0044,
    0xFFFF_FFFF,
    0xFFFF_FFFF,
    SYNC_WORD,
    0x2000_0000, // NOOP
];
const TAIL: [u32; 4] = [
    0x3000_8001, // write CMD
    0x0000_000D, // DESYNC
    0x2000_0000,
    0x2000_0000,
];

/// Smallest synthetic bitstream: the head and tail words alone.
pub const MIN_SYNTHETIC_BITS: u64 = ((HEAD.len() + TAIL.len()) * 32) as u64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitstreamError {
    #[error("a bitstream is whole 32-bit words: {0} bits is not a multiple of 32")]
    NotWords(u64),
    #[error("{bits} bits is less than the {MIN_SYNTHETIC_BITS} of the sync and desync words")]
    TooSmall { bits: u64 },
}

/// A synthetic bitstream of exactly `bits` bits whose content depends only
/// on `bits` and `seed` (e.g. the program name).
pub fn synthetic(bits: u64, seed: &str) -> Result<Vec<u8>, BitstreamError> {
    if !bits.is_multiple_of(32) {
        return Err(BitstreamError::NotWords(bits));
    }
    if bits < MIN_SYNTHETIC_BITS {
        return Err(BitstreamError::TooSmall { bits });
    }
    let words = (bits / 32) as usize;
    let mut out = Vec::with_capacity(words * 4);
    for w in HEAD {
        out.extend_from_slice(&w.to_be_bytes());
    }
    let digest = sha256(seed.as_bytes());
    // xorshift64*, never seeded with 0.
    let mut x = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")) | 1;
    for _ in 0..words - HEAD.len() - TAIL.len() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let w = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32;
        out.extend_from_slice(&w.to_be_bytes());
    }
    for w in TAIL {
        out.extend_from_slice(&w.to_be_bytes());
    }
    Ok(out)
}

/// Whether the configuration logic would synchronize on `bytes`: the sync
/// word appears as an aligned 32-bit big-endian word.
pub fn has_sync_word(bytes: &[u8]) -> bool {
    bytes
        .chunks_exact(4)
        .any(|w| u32::from_be_bytes(w.try_into().expect("4 bytes")) == SYNC_WORD)
}

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_is_exact_deterministic_and_syncs() {
        let a = synthetic(2_800_000, "l2switch").unwrap();
        assert_eq!(a.len() * 8, 2_800_000);
        assert_eq!(a, synthetic(2_800_000, "l2switch").unwrap());
        let b = synthetic(2_800_000, "router").unwrap();
        assert_ne!(sha256(&a), sha256(&b));
        assert!(has_sync_word(&a));
        assert_eq!(&a[20..24], &SYNC_WORD.to_be_bytes());
        assert_eq!(&a[a.len() - 12..a.len() - 8], &0x0000_000Du32.to_be_bytes());
        // Same seed, other size: a different bitstream sharing its start.
        let c = synthetic(1_400_000, "l2switch").unwrap();
        assert_eq!(&a[..1000], &c[..1000]);
        assert_eq!(synthetic(MIN_SYNTHETIC_BITS, "x").unwrap().len(), 44);
    }

    #[test]
    fn synthetic_refuses_partial_words_and_tiny_sizes() {
        assert_eq!(synthetic(100, "x"), Err(BitstreamError::NotWords(100)));
        assert_eq!(
            synthetic(320, "x"),
            Err(BitstreamError::TooSmall { bits: 320 })
        );
    }

    #[test]
    fn sync_word_must_be_aligned() {
        let mut bytes = vec![0u8; 16];
        bytes[5..9].copy_from_slice(&SYNC_WORD.to_be_bytes());
        assert!(!has_sync_word(&bytes));
        bytes[8..12].copy_from_slice(&SYNC_WORD.to_be_bytes());
        assert!(has_sync_word(&bytes));
        assert_eq!(
            hex(&sha256(b"abc"))[..16],
            *"ba7816bf8f01cfea",
            "FIPS 180-2 test vector"
        );
    }
}
