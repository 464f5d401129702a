//! A pool on SQLite, PostgreSQL or MariaDB, for the tests that write beside idem's records or
//! read them directly: statements by text, whichever database the pool is on.

/// A pool on one of the three SQL databases.
pub enum SqlPool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
}

macro_rules! on_pool {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            SqlPool::Sqlite($p) => $body,
            SqlPool::Postgres($p) => $body,
            SqlPool::MySql($p) => $body,
        }
    };
}

impl SqlPool {
    /// A pool of its own on `url` (`sqlite://..`, `postgres://..` or `mysql://..`).
    pub async fn connect(url: &str) -> SqlPool {
        if url.starts_with("sqlite") {
            SqlPool::Sqlite(sqlx::SqlitePool::connect(url).await.unwrap())
        } else if url.starts_with("postgres") {
            SqlPool::Postgres(sqlx::PgPool::connect(url).await.unwrap())
        } else {
            SqlPool::MySql(sqlx::MySqlPool::connect(url).await.unwrap())
        }
    }

    pub async fn execute(&self, sql: String) {
        on_pool!(self, |p| {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(p)
                .await
                .unwrap();
        })
    }

    /// The one integer `sql` selects.
    pub async fn count(&self, sql: String) -> i64 {
        on_pool!(self, |p| sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(p)
            .await
            .unwrap())
    }

    /// The one text `sql` selects.
    pub async fn text(&self, sql: String) -> String {
        on_pool!(self, |p| sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(p)
            .await
            .unwrap())
    }

    pub async fn close(&self) {
        on_pool!(self, |p| p.close().await)
    }
}
