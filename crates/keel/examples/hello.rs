//! A minimal HTTP/1.1 server: hyper on keel, answering every request with
//! "Hello, world!".
//!
//! ```text
//! cargo run -p keel --example hello --features hyper
//! curl http://127.0.0.1:3000/
//! ```

use std::convert::Infallible;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use keel::net::TcpListener;

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, world!",
    ))))
}

fn main() -> std::io::Result<()> {
    let rt = keel::Runtime::new()?;
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:3000")?;
        println!("listening on http://{}", listener.local_addr()?);
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                // Out of descriptors or a connection reset before accept:
                // keep serving the others.
                Err(error) => {
                    eprintln!("accept: {error}");
                    keel::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            keel::spawn(async move {
                if let Err(error) = http1::Builder::new()
                    .serve_connection(stream, service_fn(hello))
                    .await
                {
                    eprintln!("connection: {error}");
                }
            });
        }
    })
}
