//! What a P4Runtime device sends on its own on the arbitration stream
//! (digest lists, idle timeout notifications), handed to whoever
//! subscribed ([`P4RuntimeDevice::notices`]).
//!
//! Digest lists are acknowledged by the session as it reads them, whether
//! or not anyone subscribed: the device holds the same digest data back
//! until its list is acked (or the ack timeout passes), so an ack on
//! receipt lets it report again what is still unknown, and a slow
//! subscriber never stalls the device. A subscriber that lags behind the
//! channel's bound loses the oldest notices (`RecvError::Lagged`, which
//! says how many); learning digests come again while their cause
//! persists.

use p4fleet_proto::p4runtime::{
    self as p4rt, StreamMessageRequest, StreamMessageResponse, stream_message_request,
    stream_message_response,
};
use tokio::sync::broadcast;

use super::P4RuntimeDevice;

/// Notices kept for a subscriber that has not read them yet.
pub(crate) const NOTICE_BUFFER: usize = 1024;

/// One message the device sent without being asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    DigestList {
        device_id: u64,
        list: p4rt::DigestList,
    },
    IdleTimeout {
        device_id: u64,
        notification: p4rt::IdleTimeoutNotification,
    },
}

/// The notice in `m`, if it is one, and the reply it needs (a digest
/// list's ack).
pub(crate) fn notice_of(
    device_id: u64,
    m: &StreamMessageResponse,
) -> Option<(Notice, Option<StreamMessageRequest>)> {
    match m.update.as_ref()? {
        stream_message_response::Update::Digest(list) => {
            let ack = StreamMessageRequest {
                update: Some(stream_message_request::Update::DigestAck(
                    p4rt::DigestListAck {
                        digest_id: list.digest_id,
                        list_id: list.list_id,
                    },
                )),
            };
            Some((
                Notice::DigestList {
                    device_id,
                    list: list.clone(),
                },
                Some(ack),
            ))
        }
        stream_message_response::Update::IdleTimeoutNotification(n) => Some((
            Notice::IdleTimeout {
                device_id,
                notification: n.clone(),
            },
            None,
        )),
        _ => None,
    }
}

impl P4RuntimeDevice {
    /// Digest lists and idle timeout notifications of every device id
    /// (slot) this connection has a session with, from now on.
    pub fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_lists_are_acked_and_idle_notifications_passed_on() {
        let list = p4rt::DigestList {
            digest_id: 7,
            list_id: 3,
            data: vec![],
            timestamp: 1,
        };
        let m = StreamMessageResponse {
            update: Some(stream_message_response::Update::Digest(list.clone())),
        };
        let (notice, reply) = notice_of(9, &m).unwrap();
        assert_eq!(notice, Notice::DigestList { device_id: 9, list });
        let Some(stream_message_request::Update::DigestAck(ack)) = reply.unwrap().update else {
            panic!("not an ack");
        };
        assert_eq!((ack.digest_id, ack.list_id), (7, 3));

        let idle = StreamMessageResponse {
            update: Some(stream_message_response::Update::IdleTimeoutNotification(
                p4rt::IdleTimeoutNotification::default(),
            )),
        };
        assert!(matches!(
            notice_of(9, &idle),
            Some((Notice::IdleTimeout { .. }, None))
        ));
        assert!(notice_of(9, &StreamMessageResponse::default()).is_none());
    }
}
