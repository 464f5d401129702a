//! A connected store ([`Db`]) and the statements `idem` sends it: each store's operator
//! statements (`idem::store::<backend>::sql`).
//!
//! The rule: every statement is the store's own, with bind parameters only, and every "now" the
//! database's; a command that reads SQL answers on Redis that it does not ([`SQL_ONLY`]), except
//! where `redis` does the same with the store's scripts.

use idem::seal::StoredResponse;
use idem::store::{Store, Unreachable, masked_url, mysql, postgres, sqlite};
use idem::{MySqlStore, PostgresStore, SqliteStore};
use sqlx::{MySqlPool, PgPool, Row, SqlitePool};

use crate::error::Error;
use crate::record::{Oldest, Record, Stats, StoredRow};
use crate::redis::RedisDb;

/// The operator statements of one backend (`idem::store::<backend>::sql`), with the store's own
/// table names and "now".
struct Statements {
    /// One record, every column cast to the same Rust types on the three backends.
    inspect: &'static str,
    /// The number of records `purge` would delete now.
    expired: &'static str,
    /// The oldest live processing record: its key hash, when its lease was taken, and now.
    oldest: &'static str,
    /// Live records expiring within the next hour and the next day.
    expiring: &'static str,
    /// See [`Action::Release`].
    release: &'static str,
    /// See [`Action::Expire`].
    expire: &'static str,
    /// Live stored records (completed or failed-but-stored): what `rekey` reads.
    stored: &'static str,
    /// One page of them after a key hash, in key-hash order (`rekey`).
    page: &'static str,
    /// One of them, by key hash (`rekey`, after a record changed under it).
    one: &'static str,
    /// The response of a stored record replaced while its row version is still the one read
    /// (`rekey`).
    rewrite: &'static str,
    /// Records by state (expired ones included: they hold rows until purged).
    by_state: &'static str,
    /// Remembered records: past their TTL, within their remember window.
    remembered: &'static str,
    /// Table and index size in bytes (SQLite: the whole database file, and no index figure).
    size: &'static str,
    /// idem's migration history (the table may not exist yet).
    history: &'static str,
}

/// The [`Statements`] of `idem::store::$backend::sql`.
macro_rules! statements {
    ($backend:ident) => {
        Statements {
            inspect: $backend::sql::INSPECT,
            expired: $backend::sql::COUNT_EXPIRED,
            oldest: $backend::sql::OLDEST_PROCESSING,
            expiring: $backend::sql::EXPIRING,
            release: $backend::sql::END_LEASE,
            expire: $backend::sql::EXPIRE,
            stored: $backend::sql::COUNT_STORED,
            page: $backend::sql::STORED_PAGE,
            one: $backend::sql::STORED_ONE,
            rewrite: $backend::sql::REWRITE_RESPONSE,
            by_state: $backend::sql::COUNT_BY_STATE,
            remembered: $backend::sql::COUNT_REMEMBERED,
            size: $backend::sql::SIZE,
            history: $backend::sql::MIGRATIONS,
        }
    };
}

const PG: Statements = statements!(postgres);
const MY: Statements = statements!(mysql);
const LITE: Statements = statements!(sqlite);

/// A connected store and its pool.
pub(crate) enum Db {
    Pg(PostgresStore, PgPool),
    My(MySqlStore, MySqlPool),
    Lite(SqliteStore, SqlitePool),
    /// `migrate`, `purge` and `rekey` only: the other commands read SQL.
    Redis(Box<RedisDb>),
}

/// What a command that reads SQL answers on Redis.
const SQL_ONLY: &str = "this command reads the SQL stores only: on Redis, `migrate`, `purge` \
    and `rekey` work, and a record is the hash `<prefix>rec:<key hash>` (redis-cli HGETALL)";

/// Runs `$body` with `$q` bound to the backend's statement `.field` of [`Statements`] and
/// `$pool` to its pool.
macro_rules! on {
    ($db:expr, .$field:ident, |$q:ident, $pool:ident| $body:expr) => {
        match $db {
            Db::Pg(_, $pool) => {
                let $q = PG.$field;
                $body
            }
            Db::My(_, $pool) => {
                let $q = MY.$field;
                $body
            }
            Db::Lite(_, $pool) => {
                let $q = LITE.$field;
                $body
            }
            Db::Redis(_) => return Err(SQL_ONLY.into()),
        }
    };
}

impl Db {
    /// The store `url` names, connected; a first connection that fails says what the URL
    /// reaches and why, as one line ([`Unreachable`]).
    pub(crate) async fn connect(url: &str, prefix: &str) -> Result<Db, Error> {
        Self::connect_to(url, prefix).await.map_err(|e| {
            if e.is::<UnsupportedUrl>() {
                return e;
            }
            Unreachable {
                url,
                error: e.as_ref(),
                setting: "--database-url or DATABASE_URL",
            }
            .to_string()
            .into()
        })
    }

    async fn connect_to(url: &str, prefix: &str) -> Result<Db, Error> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let s = PostgresStore::connect(url).await?;
            let p = s.pool().clone();
            Ok(Db::Pg(s, p))
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let s = MySqlStore::connect(&url).await?;
            let p = s.pool().clone();
            Ok(Db::My(s, p))
        } else if url.starts_with("redis://") || url.starts_with("rediss://") {
            Ok(Db::Redis(Box::new(RedisDb::connect(url, prefix).await?)))
        } else if url.starts_with("sqlite:") || !url.contains("://") {
            // A path, or any of sqlx's SQLite URLs, as the stores' applications take them.
            let database = url
                .trim_start_matches("sqlite://")
                .trim_start_matches("sqlite:");
            let database = database.split('?').next().unwrap_or_default();
            if database.is_empty() || database == ":memory:" || url.contains("mode=memory") {
                return Err(UnsupportedUrl(
                    "a SQLite database URL needs a file: sqlite://path/to/file.db".to_owned(),
                )
                .into());
            }
            let s = SqliteStore::connect(url).await?;
            let p = s.pool().clone();
            Ok(Db::Lite(s, p))
        } else {
            Err(UnsupportedUrl(format!(
                "unsupported database URL `{}`: use postgres://, mysql:// (MariaDB too), sqlite:// \
                 (or a SQLite file's path) or redis://",
                masked_url(url)
            ))
            .into())
        }
    }

    pub(crate) fn store(&self) -> &dyn Store {
        match self {
            Db::Pg(s, _) => s,
            Db::My(s, _) => s,
            Db::Lite(s, _) => s,
            Db::Redis(r) => &r.store,
        }
    }

    /// idem's migration history; empty before the first migration, and on Redis (no schema).
    pub(crate) async fn history(&self) -> Result<Vec<(i64, String)>, Error> {
        let rows: Result<Vec<(i64, String)>, sqlx::Error> = on!(self, .history, |q, pool| {
            sqlx::query_as(q).fetch_all(pool).await
        });
        // Absent before the first migration: nothing applied.
        Ok(rows.unwrap_or_default())
    }

    pub(crate) async fn count_expired(&self) -> Result<i64, Error> {
        Ok(on!(self, .expired, |q, pool| {
            sqlx::query_scalar::<_, i64>(q).fetch_one(pool).await?
        }))
    }

    pub(crate) async fn inspect(&self, hash: &[u8]) -> Result<Option<Record>, Error> {
        macro_rules! read {
            ($row:expr) => {{
                let r = $row;
                Record {
                    key: r.try_get(0)?,
                    state: r.try_get(1)?,
                    fence: r.try_get(2)?,
                    lease_until: r.try_get(3)?,
                    expire_at: r.try_get(4)?,
                    request_hash: r.try_get(5)?,
                    status: r.try_get(6)?,
                    biz_no: r.try_get(7)?,
                    operation_id: r.try_get(8)?,
                    body: r.try_get(9)?,
                    created_at: r.try_get(10)?,
                    updated_at: r.try_get(11)?,
                    now: r.try_get(12)?,
                    headers: r.try_get(13)?,
                    replay_until: r.try_get(14)?,
                }
            }};
        }
        Ok(on!(self, .inspect, |q, pool| {
            match sqlx::query(q).bind(hash).fetch_optional(pool).await? {
                Some(row) => Some(read!(row)),
                None => None,
            }
        }))
    }

    pub(crate) async fn count_stored(&self) -> Result<i64, Error> {
        Ok(on!(self, .stored, |q, pool| {
            sqlx::query_scalar::<_, i64>(q).fetch_one(pool).await?
        }))
    }

    /// At most `limit` live stored records with a key hash above `after`, in key-hash order.
    pub(crate) async fn page(&self, after: &[u8], limit: u32) -> Result<Vec<StoredRow>, Error> {
        Ok(on!(self, .page, |q, pool| {
            sqlx::query_as(q)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
        }))
    }

    /// The live stored record of `hash`, if it still is one.
    pub(crate) async fn stored_row(&self, hash: &[u8]) -> Result<Option<StoredRow>, Error> {
        if let Db::Redis(r) = self {
            return r.stored_row(hash).await;
        }
        Ok(on!(self, .one, |q, pool| {
            sqlx::query_as(q).bind(hash).fetch_optional(pool).await?
        }))
    }

    /// Writes `new` over the response of `row`, if the row is still at the version read:
    /// whether it was.
    pub(crate) async fn rewrite(
        &self,
        row: &StoredRow,
        idem_key: &str,
        new: &StoredResponse,
    ) -> Result<bool, Error> {
        if let Db::Redis(r) = self {
            return r.rewrite(row, idem_key, new).await;
        }
        let n = on!(self, .rewrite, |q, pool| {
            sqlx::query(q)
                .bind(idem_key)
                .bind(&new.headers)
                .bind(&new.body)
                // Empty for a sealed response; the business number of one opened back to
                // plaintext (`rekey --unseal`).
                .bind(&new.biz_no)
                .bind(&row.key_hash)
                .bind(&row.operation_id)
                .bind(row.rev)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n == 1)
    }

    /// `release` or `expire` of the record `hash` while it is still operation `operation_id`
    /// at `fence`: the number of rows changed.
    pub(crate) async fn operate(
        &self,
        action: Action,
        hash: &[u8],
        operation_id: &str,
        fence: i64,
    ) -> Result<u64, Error> {
        macro_rules! run {
            ($field:ident) => {
                on!(self, .$field, |q, pool| {
                    sqlx::query(q)
                        .bind(hash)
                        .bind(operation_id)
                        .bind(fence)
                        .execute(pool)
                        .await?
                        .rows_affected()
                })
            };
        }
        Ok(match action {
            Action::Release => run!(release),
            Action::Expire => run!(expire),
        })
    }

    pub(crate) async fn stats(&self) -> Result<Stats, Error> {
        let by_state: Vec<(i64, i64)> = on!(self, .by_state, |q, pool| {
            sqlx::query_as(q).fetch_all(pool).await?
        });
        let count = |state| {
            by_state
                .iter()
                .find(|(s, _)| *s == state)
                .map_or(0, |x| x.1)
        };
        let oldest: Option<(String, i64, i64)> = on!(self, .oldest, |q, pool| {
            sqlx::query_as(q).fetch_optional(pool).await?
        });
        let (expiring_1h, expiring_1d): (i64, i64) = on!(self, .expiring, |q, pool| {
            sqlx::query_as(q).fetch_one(pool).await?
        });
        let (table_bytes, index_bytes): (Option<i64>, Option<i64>) = on!(self, .size, |q, pool| {
            sqlx::query_as(q).fetch_optional(pool).await?
        })
        .unwrap_or((None, None));
        Ok(Stats {
            processing: count(0),
            completed: count(1),
            failed_stored: count(2),
            expired: self.count_expired().await?,
            remembered: on!(self, .remembered, |q, pool| {
                sqlx::query_scalar::<_, i64>(q).fetch_one(pool).await?
            }),
            oldest_processing: oldest.map(|(key_hash, locked_at, now)| Oldest {
                key_hash,
                locked_at,
                now,
            }),
            expiring_1h,
            expiring_1d,
            // SQLite has no index figure (-1).
            table_bytes: table_bytes.filter(|b| *b >= 0),
            index_bytes: index_bytes.filter(|b| *b >= 0),
        })
    }
}

/// The operator's actions on one record, guarded by its operation id and fence: both touch the
/// row only as the operator saw it in `inspect`. The fence alone would not do, since a record
/// purged and claimed afresh starts again at fence 1 (S25).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Ends the lease of a processing record, like the engine's abandon: the record and its
    /// operation id stay, `lease_until` becomes now, and the next request with the same body
    /// takes it over (fence + 1, same operation id, S23), so a handler that did reach its side
    /// effects is recognised downstream by that id. Deleting the record instead would be safe
    /// only when the operator knows the handler did nothing: the next request would run under a
    /// new operation id.
    Release,
    /// Makes the record logically absent now (S21), whatever its state: the key is free, and the
    /// next claim replaces the record with a new operation id and fence + 1, which fences out a
    /// handler still running under the old lease. Nothing is deleted (purge does that later), so
    /// the row stays readable for the post-mortem until then.
    Expire,
}

/// A URL `idem` does not connect to at all: said as it is, not as an unreachable database.
#[derive(Debug)]
struct UnsupportedUrl(String);

impl std::fmt::Display for UnsupportedUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnsupportedUrl {}
