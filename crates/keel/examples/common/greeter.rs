//! A gRPC service written against tonic's server and client traits, with
//! its messages declared by hand with `prost` (what `tonic-build` would
//! generate from a `.proto`, so no `protoc` is needed):
//!
//! ```proto
//! package greeter;
//! service Greeter {
//!   rpc SayHello (HelloRequest) returns (HelloReply);                    // unary
//!   rpc SayHelloStream (HelloRequest) returns (stream HelloReply);       // server streaming
//! }
//! message HelloRequest { string name = 1; uint32 count = 2; }
//! message HelloReply { string message = 1; }
//! ```
//!
//! tonic's own transport (`tonic::transport::Server`, `Channel`) is built
//! on tokio's sockets, `tokio::spawn` and tokio's timers, so it runs on a
//! keel runtime's tokio side (feature `tokio-context`; see the test
//! `compat_tonic_transport`). Its services and codecs need no tokio:
//! [`GreeterServer`] is a plain tower service, served on keel like any
//! other (see `serve.rs`), and [`Http2Channel`] carries tonic's client
//! over a hyper HTTP/2 connection on a keel stream.

#![allow(dead_code)]

use std::convert::Infallible;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{self, Iter};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper::http::uri::PathAndQuery;
use hyper::{Request, Response, Uri};
use tonic::body::Body as GrpcBody;
use tonic::server::{Grpc, ServerStreamingService, UnaryService};
use tonic::Status;
use tonic_prost::ProstCodec;

/// The request of both methods.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloRequest {
    /// Whom to greet.
    #[prost(string, tag = "1")]
    pub name: String,
    /// How many replies `SayHelloStream` sends.
    #[prost(uint32, tag = "2")]
    pub count: u32,
}

/// A greeting.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloReply {
    /// The greeting.
    #[prost(string, tag = "1")]
    pub message: String,
}

/// The most replies one `SayHelloStream` call may ask for: a request is
/// input, and input must not make the server allocate without bound.
pub const MAX_STREAM_REPLIES: u32 = 10_000;

const SAY_HELLO: &str = "/greeter.Greeter/SayHello";
const SAY_HELLO_STREAM: &str = "/greeter.Greeter/SayHelloStream";

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

/// `SayHello`.
struct SayHello;

impl UnaryService<HelloRequest> for SayHello {
    type Response = HelloReply;
    type Future = BoxFuture<tonic::Response<HelloReply>, Status>;

    fn call(&mut self, request: tonic::Request<HelloRequest>) -> Self::Future {
        Box::pin(async move {
            let name = request.into_inner().name;
            if name.is_empty() {
                return Err(Status::invalid_argument("name is empty"));
            }
            Ok(tonic::Response::new(HelloReply {
                message: format!("Hello, {name}!"),
            }))
        })
    }
}

/// `SayHelloStream`.
struct SayHelloStream;

type ReplyStream = Iter<std::vec::IntoIter<Result<HelloReply, Status>>>;

impl ServerStreamingService<HelloRequest> for SayHelloStream {
    type Response = HelloReply;
    type ResponseStream = ReplyStream;
    type Future = BoxFuture<tonic::Response<ReplyStream>, Status>;

    fn call(&mut self, request: tonic::Request<HelloRequest>) -> Self::Future {
        Box::pin(async move {
            let HelloRequest { name, count } = request.into_inner();
            if count > MAX_STREAM_REPLIES {
                return Err(Status::out_of_range(format!(
                    "count {count} is over {MAX_STREAM_REPLIES}"
                )));
            }
            let replies: Vec<_> = (1..=count)
                .map(|i| {
                    Ok(HelloReply {
                        message: format!("Hello #{i}, {name}!"),
                    })
                })
                .collect();
            Ok(tonic::Response::new(stream::iter(replies)))
        })
    }
}

/// The `Greeter` service as a tower service, routing by path as
/// generated code does.
#[derive(Clone, Debug, Default)]
pub struct GreeterServer;

impl tonic::server::NamedService for GreeterServer {
    const NAME: &'static str = "greeter.Greeter";
}

impl<B> tower::Service<Request<B>> for GreeterServer
where
    B: hyper::body::Body + Send + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>> + Send + 'static,
{
    type Response = Response<GrpcBody>;
    type Error = Infallible;
    type Future = BoxFuture<Response<GrpcBody>, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        match request.uri().path() {
            SAY_HELLO => Box::pin(async move {
                let mut grpc = Grpc::new(ProstCodec::<HelloReply, HelloRequest>::default());
                Ok(grpc.unary(SayHello, request).await)
            }),
            SAY_HELLO_STREAM => Box::pin(async move {
                let mut grpc = Grpc::new(ProstCodec::<HelloReply, HelloRequest>::default());
                Ok(grpc.server_streaming(SayHelloStream, request).await)
            }),
            _ => Box::pin(async {
                Ok(Status::unimplemented("no such method").into_http::<GrpcBody>())
            }),
        }
    }
}

/// tonic's client transport, as a tower service over one hyper HTTP/2
/// connection (on a keel stream, with keel's executor).
#[derive(Clone, Debug)]
pub struct Http2Channel {
    sender: SendRequest<GrpcBody>,
}

impl Http2Channel {
    /// Wraps the sending half of an HTTP/2 client connection.
    pub fn new(sender: SendRequest<GrpcBody>) -> Http2Channel {
        Http2Channel { sender }
    }
}

impl tower::Service<Request<GrpcBody>> for Http2Channel {
    type Response = Response<Incoming>;
    type Error = hyper::Error;
    type Future = BoxFuture<Response<Incoming>, hyper::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.sender.poll_ready(cx)
    }

    fn call(&mut self, request: Request<GrpcBody>) -> Self::Future {
        Box::pin(self.sender.send_request(request))
    }
}

/// A `Greeter` client over `channel` to the server at `origin`
/// (`http://host:port`).
pub struct GreeterClient<C = Http2Channel> {
    grpc: tonic::client::Grpc<C>,
}

impl GreeterClient {
    /// A client of the server at `origin`.
    pub fn new(channel: Http2Channel, origin: Uri) -> GreeterClient {
        GreeterClient {
            grpc: tonic::client::Grpc::with_origin(channel, origin),
        }
    }
}

impl<C> GreeterClient<C>
where
    C: tonic::client::GrpcService<GrpcBody>,
    C::ResponseBody: hyper::body::Body + Send + 'static,
    <C::ResponseBody as hyper::body::Body>::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    /// A client over any gRPC channel (tonic's own `Channel`, say).
    pub fn over(channel: C) -> GreeterClient<C> {
        GreeterClient {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    async fn ready(&mut self) -> Result<(), Status> {
        self.grpc.ready().await.map_err(|error| {
            let error: Box<dyn StdError + Send + Sync> = error.into();
            Status::unavailable(format!("connection: {error}"))
        })
    }

    /// Calls `SayHello`.
    pub async fn say_hello(&mut self, name: &str) -> Result<HelloReply, Status> {
        self.ready().await?;
        let request = tonic::Request::new(HelloRequest {
            name: name.to_string(),
            count: 0,
        });
        let codec = ProstCodec::<HelloRequest, HelloReply>::default();
        let path = PathAndQuery::from_static(SAY_HELLO);
        Ok(self.grpc.unary(request, path, codec).await?.into_inner())
    }

    /// Calls `SayHelloStream` and collects the replies.
    pub async fn say_hello_stream(
        &mut self,
        name: &str,
        count: u32,
    ) -> Result<Vec<HelloReply>, Status> {
        self.ready().await?;
        let request = tonic::Request::new(HelloRequest {
            name: name.to_string(),
            count,
        });
        let codec = ProstCodec::<HelloRequest, HelloReply>::default();
        let path = PathAndQuery::from_static(SAY_HELLO_STREAM);
        let mut stream = self
            .grpc
            .server_streaming(request, path, codec)
            .await?
            .into_inner();
        let mut replies = Vec::new();
        while let Some(reply) = stream.message().await? {
            replies.push(reply);
        }
        Ok(replies)
    }
}

/// Opens an HTTP/2 connection to `addr` on keel and returns a client.
pub async fn connect(addr: std::net::SocketAddr) -> std::io::Result<GreeterClient> {
    let stream = keel::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http2::handshake(
        keel::compat::hyper::HyperExecutor::current(),
        stream,
    )
    .await
    .map_err(std::io::Error::other)?;
    keel::spawn(async move {
        let _ = connection.await;
    });
    let origin: Uri = format!("http://{addr}")
        .parse()
        .map_err(std::io::Error::other)?;
    Ok(GreeterClient::new(Http2Channel::new(sender), origin))
}
