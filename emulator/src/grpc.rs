//! The gRPC serving both front ends share: a generated tonic service with
//! its Write and Read methods replaced by hand-written wire handlers
//! ([`WireMethods`]): requests reach them as the encoded message bytes
//! ([`RawCodec`], zero-copy) and answers leave as bytes the handler encoded
//! itself; and StreamChannel sessions run as tasks ([`session`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use futures::Stream;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{Body, BoxFuture, Service, StdError, http};
use tonic::server::NamedService;
use tonic::{Request, Response, Status, Streaming};

/// A gRPC codec that passes encoded messages through.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        // A view of the frame tonic already buffered, not a copy.
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The Write (unary) and Read (server streaming) handlers of a service on
/// encoded messages.
pub(crate) trait WireMethods: Clone + Send + Sync + 'static {
    /// gRPC paths, e.g. `/p4.v1.P4Runtime/Write`.
    const WRITE: &'static str;
    const READ: &'static str;
    /// Read requests are small: decoded with prost.
    type ReadRequest: prost::Message + Default;
    /// Applies one encoded `WriteRequest`.
    fn write(&self, body: Bytes) -> impl Future<Output = Result<(), Status>> + Send;
    /// The encoded `ReadResponse` messages answering `req`.
    fn read(&self, req: &Self::ReadRequest) -> Result<Vec<Bytes>, Status>;
    /// How long the answer to `req` stalls mid-stream (an injected fault,
    /// `crate::faults`), if at all.
    fn read_stall(&self, req: &Self::ReadRequest) -> Option<std::time::Duration>;
}

/// Serves a bidirectional stream: `session` runs on a task of its own over
/// the inbound messages and sends its answers (or a final error) on `tx`;
/// the call's response stream is what it sends.
pub(crate) fn session<I, O, F>(
    inbound: Streaming<I>,
    session: impl FnOnce(Streaming<I>, mpsc::UnboundedSender<Result<O, Status>>) -> F,
) -> Response<BoxStream<O>>
where
    O: Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(session(inbound, tx));
    Response::new(Box::pin(UnboundedReceiverStream::new(rx)))
}

/// A boxed server stream of gRPC answers.
pub(crate) type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// A generated server `G` whose Write and Read are served by `S`.
#[derive(Clone)]
pub struct WireServer<S, G> {
    svc: S,
    generated: G,
    max_message_size: usize,
}

impl<S, G> WireServer<S, G> {
    pub(crate) fn new(svc: S, generated: G, max_message_size: usize) -> Self {
        WireServer {
            svc,
            generated,
            max_message_size,
        }
    }

    fn grpc(&self) -> tonic::server::Grpc<RawCodec> {
        tonic::server::Grpc::new(RawCodec)
            .apply_max_message_size_config(Some(self.max_message_size), Some(self.max_message_size))
    }
}

impl<S, G: NamedService> NamedService for WireServer<S, G> {
    const NAME: &'static str = G::NAME;
}

struct WriteMethod<S>(S);

impl<S: WireMethods> tonic::server::UnaryService<Bytes> for WriteMethod<S> {
    type Response = Bytes;
    type Future = BoxFuture<Response<Bytes>, Status>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let svc = self.0.clone();
        // The P4Runtime and BFRT WriteResponses of a successful Write have
        // no field set: their encoding is empty.
        Box::pin(async move {
            svc.write(request.into_inner())
                .await
                .map(|()| Response::new(Bytes::new()))
        })
    }
}

struct ReadMethod<S>(S);

impl<S: WireMethods> tonic::server::ServerStreamingService<Bytes> for ReadMethod<S> {
    type Response = Bytes;
    type ResponseStream = BoxStream<Bytes>;
    type Future = BoxFuture<Response<BoxStream<Bytes>>, Status>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let res = S::ReadRequest::decode(request.into_inner())
            .map_err(|e| Status::invalid_argument(format!("ReadRequest: {e}")))
            .and_then(|req| Ok((self.0.read(&req)?, self.0.read_stall(&req))));
        Box::pin(async move {
            let (messages, stall) = res?;
            let stream: BoxStream<Bytes> = match stall {
                None => Box::pin(tokio_stream::iter(messages.into_iter().map(Ok))),
                Some(d) => stalled(messages, d),
            };
            Ok(Response::new(stream))
        })
    }
}

/// `messages` as a stream that stalls for `d` after its first message (a
/// one-message answer stalls before it).
fn stalled(messages: Vec<Bytes>, d: std::time::Duration) -> BoxStream<Bytes> {
    use futures::StreamExt as _;
    let split = usize::from(messages.len() > 1);
    let mut rest = messages;
    let first: Vec<Bytes> = rest.drain(..split).collect();
    let pause = futures::stream::once(tokio::time::sleep(d))
        .filter_map(|()| async { None::<Result<Bytes, Status>> });
    Box::pin(
        tokio_stream::iter(first.into_iter().map(Ok))
            .chain(pause)
            .chain(tokio_stream::iter(rest.into_iter().map(Ok))),
    )
}

impl<S, G, B> Service<http::Request<B>> for WireServer<S, G>
where
    S: WireMethods,
    G: Service<
            http::Request<B>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
            Future = BoxFuture<http::Response<tonic::body::Body>, Infallible>,
        >,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let path = req.uri().path();
        if path == S::WRITE {
            let mut grpc = self.grpc();
            let method = WriteMethod(self.svc.clone());
            Box::pin(async move { Ok(grpc.unary(method, req).await) })
        } else if path == S::READ {
            let mut grpc = self.grpc();
            let method = ReadMethod(self.svc.clone());
            Box::pin(async move { Ok(grpc.server_streaming(method, req).await) })
        } else {
            self.generated.call(req)
        }
    }
}
