//! Routing: which answer each request gets.

use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::{metrics, negotiate, report, Shared};

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

/// The answer to `request`. The body of a request is never read: no route
/// takes one.
pub(super) fn answer(shared: &Arc<Shared>, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if declared_body(request).is_some_and(|len| len > shared.options.max_request_bytes as u64) {
        let mut response = plain(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n");
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    let path = request.uri().path();
    let route = match path {
        "/health" | "/status" | "/stats" | "/metrics" => path,
        _ => return plain(StatusCode::NOT_FOUND, "not found\n"),
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match route {
        "/health" => plain(StatusCode::OK, "ok\n"),
        "/status" => {
            let stats = shared.handle.stats();
            let mut text = report::status(shared, &stats);
            if let Some(section) = &shared.options.status_section {
                text.push_str(&(section.0)());
            }
            plain(StatusCode::OK, text)
        }
        "/stats" => {
            let stats = shared.handle.stats();
            let json = report::stats_document(shared, &stats).to_json();
            with_type(StatusCode::OK, JSON, json)
        }
        _ => {
            let accept = request.headers().get_all(header::ACCEPT);
            let format = negotiate::metrics_format(accept.iter().map(HeaderValue::as_bytes));
            let stats = shared.handle.stats();
            match metrics::encode(shared, stats, format) {
                Ok(text) => {
                    let mut response = with_type(StatusCode::OK, format.content_type(), text);
                    // Caches between a scraper and the endpoint must not
                    // answer one format for the other.
                    response
                        .headers_mut()
                        .insert(header::VARY, HeaderValue::from_static("accept"));
                    response
                }
                Err(_) => plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "metrics could not be encoded\n",
                ),
            }
        }
    }
}

/// The `content-length` of `request`, if it declares one.
fn declared_body(request: &Request<Incoming>) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn plain(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    with_type(status, TEXT, body)
}

fn with_type(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
