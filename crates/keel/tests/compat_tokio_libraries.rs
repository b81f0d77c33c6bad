//! Libraries built on tokio's runtime, inside keel tasks, against real
//! servers that the tests start (see `support::servers`): sqlx and
//! tokio-postgres on a throwaway PostgreSQL cluster, redis-rs on a
//! `redis-server`.

#[macro_use]
mod support;

use keel::{Class, Runtime};
use support::servers::{Postgres, Redis};

fn runtimes() -> [Runtime; 2] {
    support::with_each_tokio_side(2)
}

#[test]
fn sqlx_queries_postgres_from_keel_tasks() {
    let postgres = Postgres::start("sqlx");
    for rt in runtimes() {
        let url = postgres.url();
        let sums = rt
            .block_on(rt.spawn(async move {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(4)
                    .connect(&url)
                    .await
                    .unwrap();
                sqlx::query("drop table if exists items")
                    .execute(&pool)
                    .await
                    .unwrap();
                sqlx::query("create table items (id int primary key, name text not null)")
                    .execute(&pool)
                    .await
                    .unwrap();
                // Concurrent inserts from keel tasks of every class, sharing
                // the pool.
                let inserts: Vec<_> = (0..30)
                    .map(|i| {
                        let pool = pool.clone();
                        let class = [Class::URGENT, Class::NORMAL, Class::BULK][i % 3];
                        keel::Handle::current().spawn_in(class, async move {
                            sqlx::query("insert into items (id, name) values ($1, $2)")
                                .bind(i as i32)
                                .bind(format!("item {i}"))
                                .execute(&pool)
                                .await
                                .unwrap()
                                .rows_affected()
                        })
                    })
                    .collect();
                let mut inserted = 0;
                for insert in inserts {
                    inserted += insert.await.unwrap();
                }
                let (count, total): (i64, i64) =
                    sqlx::query_as("select count(*), sum(id)::bigint from items")
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                let name: String = sqlx::query_scalar("select name from items where id = $1")
                    .bind(7)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                pool.close().await;
                (inserted, count, total, name)
            }))
            .unwrap();
        assert_eq!(sums, (30, 30, (0..30).sum::<i64>(), "item 7".to_owned()));
    }
}

#[test]
fn tokio_postgres_connects_and_queries_from_a_keel_task() {
    let postgres = Postgres::start("tokio-postgres");
    for rt in runtimes() {
        let url = postgres.url();
        let answer = rt
            .block_on(rt.spawn(async move {
                // `connect` itself: tokio's socket and its timeouts.
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                // The connection is driven by a keel task.
                let driver = keel::spawn(connection);
                let row = client
                    .query_one("select $1::int4 + 1, current_user::text", &[&41i32])
                    .await
                    .unwrap();
                let answer: (i32, String) = (row.get(0), row.get(1));
                drop(client);
                driver.await.unwrap().unwrap();
                answer
            }))
            .unwrap();
        assert_eq!(answer, (42, "keel".to_owned()));
    }
}

#[test]
fn redis_runs_from_keel_tasks() {
    let redis_server = Redis::start();
    for rt in runtimes() {
        let url = redis_server.url();
        let values = rt
            .block_on(rt.spawn(async move {
                let client = redis::Client::open(url).unwrap();
                let connection = client.get_multiplexed_async_connection().await.unwrap();
                // One multiplexed connection shared by keel tasks.
                let sets: Vec<_> = (0..20)
                    .map(|i| {
                        let mut connection = connection.clone();
                        keel::spawn(async move {
                            redis::cmd("SET")
                                .arg(format!("key{i}"))
                                .arg(i * i)
                                .query_async::<()>(&mut connection)
                                .await
                                .unwrap();
                        })
                    })
                    .collect();
                for set in sets {
                    set.await.unwrap();
                }
                let mut connection = connection;
                let mut values = Vec::new();
                for i in 0..20 {
                    let value: i64 = redis::cmd("GET")
                        .arg(format!("key{i}"))
                        .query_async(&mut connection)
                        .await
                        .unwrap();
                    values.push(value);
                }
                values
            }))
            .unwrap();
        assert_eq!(values, (0..20).map(|i| i * i).collect::<Vec<i64>>());
    }
}
