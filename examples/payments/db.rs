//! The business tables of the payments example, in the same database as the idempotency store:
//! one small enum over the three sqlx pools, and each query written once with `?` placeholders
//! (numbered `$1, $2, ..` for PostgreSQL).
//!
//! Payments are written in the handler's transaction, which idem commits together with the
//! stored response (the atomic mode): a payment exists if and only if its response is stored.
//! Refunds and events are written on the pool and completed afterwards (two commits): their
//! tables keep a unique constraint on the operation id (S23), so that if a retry takes over an
//! attempt that stalled after writing its row, the second insert fails on that constraint and
//! the row the first attempt wrote is returned instead; nothing is written twice. `payments`
//! keeps the constraint too.

use std::time::{SystemTime, UNIX_EPOCH};

use idem::SqlTx;
use sqlx::FromRow;

/// A pool of the store's database.
#[derive(Clone, Debug)]
pub enum Db {
    /// The embedded default.
    Sqlite(sqlx::SqlitePool),
    /// `postgres://..` (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// `mysql://..` (feature `mysql`).
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
}

/// Runs `$body` with `$pool` bound to the concrete pool and `$q` to the SQL text in that
/// database's placeholder syntax. The body is compiled once per backend.
macro_rules! on_pool {
    ($db:expr, $sql:expr, |$pool:ident, $q:ident| $body:expr) => {
        match $db {
            Db::Sqlite($pool) => {
                let $q: &'static str = $sql;
                $body
            }
            #[cfg(feature = "postgres")]
            Db::Postgres($pool) => {
                // Built at run time from a literal: sqlx 0.9 takes it as `AssertSqlSafe`.
                let $q = sqlx::AssertSqlSafe(dollar_placeholders($sql));
                $body
            }
            #[cfg(feature = "mysql")]
            Db::MySql($pool) => {
                let $q: &'static str = $sql;
                $body
            }
        }
    };
}

/// Runs `$body` with `$conn` bound to the connection of the handler's transaction (idem's
/// atomic mode, `Tx<AnySql>`) and `$q` to the SQL text in that database's placeholder syntax.
macro_rules! on_tx {
    ($tx:expr, $sql:expr, |$conn:ident, $q:ident| $body:expr) => {
        match $tx {
            SqlTx::Sqlite(tx) => {
                let $conn = &mut **tx;
                let $q: &'static str = $sql;
                $body
            }
            #[cfg(feature = "postgres")]
            SqlTx::Postgres(tx) => {
                let $conn = &mut **tx;
                let $q = sqlx::AssertSqlSafe(dollar_placeholders($sql));
                $body
            }
            #[cfg(feature = "mysql")]
            SqlTx::MySql(tx) => {
                let $conn = &mut **tx;
                let $q: &'static str = $sql;
                $body
            }
            _ => Err(sqlx::Error::Configuration(
                "a transaction on a database this example is not built for".into(),
            )),
        }
    };
}

/// `?` -> `$1`, `$2`, .. (the queries below have no `?` inside literals).
/// `row` once `inserted` went through; when the insert hit the unique index on `operation_id`
/// (the operation ran before, S23), the row `table` already holds for that operation.
macro_rules! row_of_operation {
    ($db:expr, $table:literal, $row:expr, $inserted:expr) => {
        match $inserted {
            Ok(()) => Ok($row.clone()),
            Err(e) if is_unique_violation(&e) => {
                let sql = concat!("SELECT * FROM ", $table, " WHERE operation_id = ?");
                on_pool!($db, sql, |pool, q| sqlx::query_as(q)
                    .bind(&$row.operation_id)
                    .fetch_one(pool)
                    .await)
            }
            Err(e) => Err(e),
        }
    };
}

#[cfg(feature = "postgres")]
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// `VARCHAR(n)` keys work as they are on SQLite, PostgreSQL and MySQL (where a `TEXT` column
/// cannot be a key); `BIGINT` times are Unix milliseconds.
const SCHEMA: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS payments (
        payment_id   VARCHAR(64)  NOT NULL PRIMARY KEY,
        operation_id VARCHAR(64)  NOT NULL UNIQUE,
        amount       VARCHAR(64)  NOT NULL,
        currency     VARCHAR(3)   NOT NULL,
        customer_id  VARCHAR(255) NOT NULL,
        order_id     VARCHAR(255) NOT NULL,
        metadata     TEXT,
        created_at   BIGINT       NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS refunds (
        refund_id     VARCHAR(64) NOT NULL PRIMARY KEY,
        operation_id  VARCHAR(64) NOT NULL UNIQUE,
        payment_id    VARCHAR(64) NOT NULL,
        amount        VARCHAR(64) NOT NULL,
        created_at_ms BIGINT      NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS events (
        event_id     VARCHAR(64)  NOT NULL PRIMARY KEY,
        operation_id VARCHAR(64)  NOT NULL UNIQUE,
        name         VARCHAR(255) NOT NULL,
        properties   TEXT
    )",
];

/// Key of the PostgreSQL advisory lock that serializes [`Db::create_tables`] ("payments" in
/// ASCII; idem's own migrations lock another key).
#[cfg(feature = "postgres")]
const SCHEMA_LOCK: i64 = 0x7061_796d_656e_7473;

/// A row of `payments`.
#[derive(Clone, Debug, FromRow)]
pub struct PaymentRow {
    pub payment_id: String,
    pub operation_id: String,
    pub amount: String,
    pub currency: String,
    pub customer_id: String,
    pub order_id: String,
    pub metadata: Option<String>,
    pub created_at: i64,
}

/// A row of `refunds`.
#[derive(Clone, Debug, FromRow)]
pub struct RefundRow {
    pub refund_id: String,
    pub operation_id: String,
    pub payment_id: String,
    pub amount: String,
    pub created_at_ms: i64,
}

/// A row of `events`.
#[derive(Clone, Debug, FromRow)]
pub struct EventRow {
    pub event_id: String,
    pub operation_id: String,
    pub name: String,
    pub properties: Option<String>,
}

/// Rows in the business tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub payments: i64,
    pub refunds: i64,
    pub events: i64,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// Inserts `row` in the handler's transaction, which commits it together with the stored
/// response (idem's atomic mode): a retry after a failure finds either both or neither, so the
/// insert needs no fallback to a row written earlier.
pub async fn insert_payment(tx: &mut SqlTx, row: &PaymentRow) -> sqlx::Result<PaymentRow> {
    let sql = "INSERT INTO payments (payment_id, operation_id, amount, currency, customer_id, \
               order_id, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
    on_tx!(tx, sql, |conn, q| sqlx::query(q)
        .bind(&row.payment_id)
        .bind(&row.operation_id)
        .bind(&row.amount)
        .bind(&row.currency)
        .bind(&row.customer_id)
        .bind(&row.order_id)
        .bind(&row.metadata)
        .bind(row.created_at)
        .execute(conn)
        .await
        .map(drop))?;
    Ok(row.clone())
}

impl Db {
    /// Creates the business tables if they do not exist; several instances may start at once.
    pub async fn create_tables(&self) -> sqlx::Result<()> {
        // On PostgreSQL two concurrent `CREATE TABLE IF NOT EXISTS` of one table race: both see
        // no table and the loser fails (42P07, or a unique violation in `pg_type`). The
        // instances of a deploy starting together therefore take turns, on an advisory lock
        // held until the transaction (DDL is transactional there) commits. MySQL/MariaDB and
        // SQLite serialize the statement themselves (metadata lock, write lock).
        #[cfg(feature = "postgres")]
        if let Db::Postgres(pool) = self {
            let mut tx = idem::store::begin_cancel_safe(pool).await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(SCHEMA_LOCK)
                .execute(&mut *tx)
                .await?;
            for ddl in SCHEMA {
                sqlx::query(ddl).execute(&mut *tx).await?;
            }
            return tx.commit().await;
        }
        for ddl in SCHEMA {
            on_pool!(self, ddl, |pool, q| sqlx::query(q)
                .execute(pool)
                .await
                .map(drop))?;
        }
        Ok(())
    }

    /// The payment `payment_id`.
    pub async fn payment(&self, payment_id: &str) -> sqlx::Result<Option<PaymentRow>> {
        let sql = "SELECT * FROM payments WHERE payment_id = ?";
        on_pool!(self, sql, |pool, q| sqlx::query_as(q)
            .bind(payment_id)
            .fetch_optional(pool)
            .await)
    }

    /// Inserts `row`, or returns the row its operation already wrote (S23).
    pub async fn insert_refund(&self, row: &RefundRow) -> sqlx::Result<RefundRow> {
        let sql = "INSERT INTO refunds (refund_id, operation_id, payment_id, amount, \
                   created_at_ms) VALUES (?, ?, ?, ?, ?)";
        let inserted = on_pool!(self, sql, |pool, q| sqlx::query(q)
            .bind(&row.refund_id)
            .bind(&row.operation_id)
            .bind(&row.payment_id)
            .bind(&row.amount)
            .bind(row.created_at_ms)
            .execute(pool)
            .await
            .map(drop));
        row_of_operation!(self, "refunds", row, inserted)
    }

    /// The refund `refund_id`.
    pub async fn refund(&self, refund_id: &str) -> sqlx::Result<Option<RefundRow>> {
        let sql = "SELECT * FROM refunds WHERE refund_id = ?";
        on_pool!(self, sql, |pool, q| sqlx::query_as(q)
            .bind(refund_id)
            .fetch_optional(pool)
            .await)
    }

    /// Inserts `row`, or returns the row its operation already wrote (S23).
    pub async fn insert_event(&self, row: &EventRow) -> sqlx::Result<EventRow> {
        let sql = "INSERT INTO events (event_id, operation_id, name, properties) \
                   VALUES (?, ?, ?, ?)";
        let inserted = on_pool!(self, sql, |pool, q| sqlx::query(q)
            .bind(&row.event_id)
            .bind(&row.operation_id)
            .bind(&row.name)
            .bind(&row.properties)
            .execute(pool)
            .await
            .map(drop));
        row_of_operation!(self, "events", row, inserted)
    }

    /// Rows in `payments`, `refunds` and `events`.
    pub async fn counts(&self) -> sqlx::Result<Counts> {
        let sql = "SELECT (SELECT COUNT(*) FROM payments), (SELECT COUNT(*) FROM refunds), \
                   (SELECT COUNT(*) FROM events)";
        let (payments, refunds, events): (i64, i64, i64) =
            on_pool!(self, sql, |pool, q| sqlx::query_as(q).fetch_one(pool).await)?;
        Ok(Counts {
            payments,
            refunds,
            events,
        })
    }
}
