//! A device's last words before it closed the connection are read before
//! the write that found it closed fails.
//!
//! A device that refuses our TLS client certificate (or its absence) does
//! so after TLS 1.3's handshake is over on our side: it sends an alert and
//! closes. By then HTTP/2 is already writing; a write that meets the closed
//! connection fails with a broken pipe or a reset, and the connection is
//! torn down with that error, the alert unread in the socket, although it
//! says what is wrong. Which comes first depends on timing (a loaded
//! machine loses the alert more often). Here a write that fails that way
//! while the peer's bytes are still unread reports success instead, and
//! the unread bytes are handed to the next read: TLS then reads the alert
//! and fails with it. Once nothing is left to read, the write error stands.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes taken from the socket when a write fails: a TLS alert record is
/// 7 bytes (31 when encrypted), and what a closed peer sent last fits a
/// small buffer; the rest is read as usual afterwards.
const TAKE: usize = 16 * 1024;

/// `T`'s reads and writes, with a write error caused by the peer's close
/// held back while the peer's last bytes are unread.
#[derive(Debug)]
pub struct ReadBeforeReset<T> {
    inner: T,
    unread: Vec<u8>,
    at: usize,
}

impl<T> ReadBeforeReset<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            unread: Vec::new(),
            at: 0,
        }
    }
}

/// The errors of a write to a connection the peer closed.
fn closed_by_peer(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    )
}

impl<T: AsyncRead + Unpin> ReadBeforeReset<T> {
    /// Whether bytes from the peer are waiting to be read (taken from the
    /// socket now if they are there).
    fn has_unread(&mut self, cx: &mut Context<'_>) -> bool {
        if self.at < self.unread.len() {
            return true;
        }
        let mut raw = vec![0; TAKE];
        let mut buf = ReadBuf::new(&mut raw);
        match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                let n = buf.filled().len();
                raw.truncate(n);
                self.unread = raw;
                self.at = 0;
                true
            }
            _ => false,
        }
    }

    /// `r`, unless it is the peer's close and its last bytes are unread:
    /// then `ok` (the error comes back on a later write, once they are).
    fn hold_back<R>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<R>>,
        ok: R,
    ) -> Poll<io::Result<R>> {
        match r {
            Poll::Ready(Err(e)) if closed_by_peer(&e) && self.has_unread(cx) => Poll::Ready(Ok(ok)),
            other => other,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ReadBeforeReset<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.at < me.unread.len() {
            let n = buf.remaining().min(me.unread.len() - me.at);
            buf.put_slice(&me.unread[me.at..me.at + n]);
            me.at += n;
            if me.at == me.unread.len() {
                me.unread = Vec::new();
                me.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ReadBeforeReset<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write(cx, buf);
        me.hold_back(cx, r, buf.len())
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write_vectored(cx, bufs);
        let all = bufs.iter().map(|b| b.len()).sum();
        me.hold_back(cx, r, all)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_flush(cx);
        me.hold_back(cx, r, ())
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_shutdown(cx);
        me.hold_back(cx, r, ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A peer that answers with `last` and closes while our first bytes
    /// are unread on its side (so its close is a reset): our socket once
    /// the reset has arrived.
    async fn closed_by_a_peer_that_said(last: &[u8]) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut ours = TcpStream::connect(addr).await.unwrap();
        let (mut theirs, _) = listener.accept().await.unwrap();
        ours.write_all(b"hello").await.unwrap();
        theirs.write_all(last).await.unwrap();
        // Let "hello" reach their receive queue unread, then close.
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(theirs);
        for _ in 0..200 {
            if ours.take_error().unwrap().is_some() {
                return ours;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the peer's reset did not arrive");
    }

    #[tokio::test]
    async fn the_peers_last_bytes_are_read_before_the_write_error() {
        // Without the wrapper the write fails and the bytes are never read.
        let mut raw = closed_by_a_peer_that_said(b"alert").await;
        let e = raw.write_all(b"more").await.unwrap_err();
        assert!(closed_by_peer(&e), "{e:?}");

        let mut s = ReadBeforeReset::new(closed_by_a_peer_that_said(b"alert").await);
        s.write_all(b"more").await.unwrap();
        s.flush().await.unwrap();
        let mut got = [0; 5];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"alert");
        // Nothing left to read: the peer's close is the write's error now.
        let e = s.write_all(b"again").await.unwrap_err();
        assert!(closed_by_peer(&e), "{e:?}");
    }

    #[tokio::test]
    async fn a_peer_that_said_nothing_fails_the_write_at_once() {
        let mut s = ReadBeforeReset::new(closed_by_a_peer_that_said(b"").await);
        let e = s.write_all(b"more").await.unwrap_err();
        assert!(closed_by_peer(&e), "{e:?}");
    }
}
