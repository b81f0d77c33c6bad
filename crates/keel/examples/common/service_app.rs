//! The example service's app, written as for tokio: an axum API that reads
//! PostgreSQL through sqlx, calls an HTTP backend with reqwest and a gRPC
//! backend with tonic's `Channel`. `service.rs` runs it on keel and
//! `service_tokio.rs` on tokio; they differ only in `main`.
//!
//! Routes:
//! - `GET /users/{id}`: the user's name, from PostgreSQL (404 if none);
//! - `GET /api/{id}`: the user's name, then the HTTP backend's answer and
//!   the gRPC backend's greeting for it: three backends per request;
//! - `GET /health`: `ok`.
//!
//! The backends are served by the same process (`backend_router`, and
//! `greeter::GreeterServer` on its own port), so that one command runs
//! the whole service.

#![allow(dead_code)]

use std::error::Error as StdError;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tonic::transport::Channel;

use super::greeter::GreeterClient;

/// Users the service's table holds (ids 1 to `USERS`).
pub const USERS: i32 = 100;

/// The error of a failed start.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// Where the service listens and finds its backends.
#[derive(Clone, Debug)]
pub struct Addresses {
    /// The API's address.
    pub api: String,
    /// The admin endpoint's address.
    pub admin: String,
    /// The HTTP backend's address, served by this process too.
    pub http_backend: String,
    /// The gRPC backend's address, served by this process too.
    pub grpc_backend: String,
    /// PostgreSQL's URL, from `DATABASE_URL`.
    pub database_url: String,
}

impl Addresses {
    /// From the arguments `API ADMIN HTTP_BACKEND GRPC_BACKEND` (defaults
    /// 127.0.0.1 ports 3000, 3009, 3002 and 3003) and `DATABASE_URL`.
    pub fn from_args() -> Result<Addresses, BoxError> {
        let mut args = std::env::args().skip(1);
        let mut next = |default: &str| args.next().unwrap_or_else(|| default.to_owned());
        Ok(Addresses {
            api: next("127.0.0.1:3000"),
            admin: next("127.0.0.1:3009"),
            http_backend: next("127.0.0.1:3002"),
            grpc_backend: next("127.0.0.1:3003"),
            database_url: std::env::var("DATABASE_URL")
                .map_err(|_| "set DATABASE_URL to a PostgreSQL URL (see the example's docs)")?,
        })
    }

    /// The gRPC backend's URL.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc_backend)
    }
}

/// The clients every request shares.
#[derive(Clone)]
pub struct Clients {
    db: PgPool,
    http: reqwest::Client,
    http_base: String,
    grpc: Channel,
}

/// Connects to the backends (the gRPC one through `grpc`, a channel the
/// caller opened) and fills the users' table if it is empty.
pub async fn connect(addresses: &Addresses, grpc: Channel) -> Result<Clients, BoxError> {
    let db = PgPoolOptions::new()
        .max_connections(8)
        .connect(&addresses.database_url)
        .await?;
    sqlx::query("create table if not exists users (id int primary key, name text not null)")
        .execute(&db)
        .await?;
    sqlx::query(
        "insert into users select i, 'user' || i from generate_series(1, $1) i \
         on conflict do nothing",
    )
    .bind(USERS)
    .execute(&db)
    .await?;
    Ok(Clients {
        db,
        http: reqwest::Client::new(),
        http_base: format!("http://{}", addresses.http_backend),
        grpc,
    })
}

/// The API.
pub fn app(clients: Clients) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/users/{id}", get(user))
        .route("/api/{id}", get(api))
        .with_state(clients)
}

/// The HTTP backend: `GET /score/{name}` answers with a number for the
/// name.
pub fn backend_router() -> Router {
    Router::new().route(
        "/score/{name}",
        get(|Path(name): Path<String>| async move {
            let score: u32 = name.bytes().map(u32::from).sum();
            score.to_string()
        }),
    )
}

type Answer = Result<String, (StatusCode, String)>;

fn failed(what: &str, error: impl std::fmt::Display) -> (StatusCode, String) {
    (StatusCode::BAD_GATEWAY, format!("{what}: {error}"))
}

async fn name_of(clients: &Clients, id: i32) -> Answer {
    let name: Option<String> = sqlx::query_scalar("select name from users where id = $1")
        .bind(id)
        .fetch_optional(&clients.db)
        .await
        .map_err(|e| failed("database", e))?;
    name.ok_or((StatusCode::NOT_FOUND, format!("no user {id}")))
}

async fn user(State(clients): State<Clients>, Path(id): Path<i32>) -> Answer {
    name_of(&clients, id).await
}

async fn api(State(clients): State<Clients>, Path(id): Path<i32>) -> Answer {
    let name = name_of(&clients, id).await?;
    let score = clients
        .http
        .get(format!("{}/score/{name}", clients.http_base))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| failed("http backend", e))?
        .text()
        .await
        .map_err(|e| failed("http backend", e))?;
    let greeting = GreeterClient::over(clients.grpc.clone())
        .say_hello(&name)
        .await
        .map_err(|e| failed("grpc backend", e))?
        .message;
    Ok(format!("{name} {score} {greeting}\n"))
}
