//! Unary gRPC calls with a request that is already protobuf bytes (see
//! [`p4fleet_model::entries::wire`]): the generated clients want a prost message,
//! which is exactly what the direct encoders avoid building. The answer is
//! still decoded with prost; errors (and per-update details in
//! `grpc-status-details-bin`) come back as a `tonic::Status` as usual.

use std::marker::PhantomData;

use prost::bytes::{BufMut, Bytes};
use tonic::client::Grpc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// A method called with pre-encoded requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Method {
    pub service: &'static str,
    pub method: &'static str,
    /// `/service/method`.
    pub path: &'static str,
}

pub(crate) const P4RT_WRITE: Method = Method {
    service: "p4.v1.P4Runtime",
    method: "Write",
    path: "/p4.v1.P4Runtime/Write",
};

pub(crate) const BFRT_WRITE: Method = Method {
    service: "bfrt_proto.BfRuntime",
    method: "Write",
    path: "/bfrt_proto.BfRuntime/Write",
};

/// Sends `Bytes` as they are, decodes answers of type `R` with prost.
pub(crate) struct RawCodec<R>(PhantomData<fn() -> R>);

impl<R> Default for RawCodec<R> {
    fn default() -> Self {
        RawCodec(PhantomData)
    }
}

impl<R: prost::Message + Default + Send + 'static> Codec for RawCodec<R> {
    type Encode = Bytes;
    type Decode = R;
    type Encoder = BytesEncoder;
    type Decoder = ProstDecoder<R>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder(PhantomData)
    }
}

pub(crate) struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        // tonic frames into its own buffer; one copy of the body.
        dst.put_slice(&item);
        Ok(())
    }
}

pub(crate) struct ProstDecoder<R>(PhantomData<fn() -> R>);

impl<R: prost::Message + Default> Decoder for ProstDecoder<R> {
    type Item = R;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<R>, Self::Error> {
        R::decode(buf)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("decoding the answer: {e}")))
    }
}

/// One unary call of `m` with `body` (the request message's bytes).
pub(crate) async fn unary<R: prost::Message + Default + Send + Sync + 'static>(
    grpc: &mut Grpc<Channel>,
    m: Method,
    body: Bytes,
) -> Result<R, tonic::Status> {
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
    let mut req = tonic::Request::new(body);
    req.extensions_mut()
        .insert(tonic::GrpcMethod::new(m.service, m.method));
    grpc.unary(
        req,
        PathAndQuery::from_static(m.path),
        RawCodec::<R>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}
