//! The [`Store`] operations of [`RedisStore`]: each one script call, its arguments and the
//! reading of its answer.
//!
//! The rule: a write that a failover must keep (claim, completion, lease extension) goes through
//! `call_durable`, and is reported done only once the replicas required hold it.

use core::time::Duration;

use super::RedisStore;
use super::connection::load;
use super::decode::{array, decode_record, int, text};
use super::lua::{ABANDON, CLAIM, COMPLETE, EXTEND, GET, PURGE, PURGE_RESPONSES, RELEASE};
use crate::key::ScopedKey;
use crate::store::clock::{Clock, SystemClock, Timestamp, duration_millis};
use crate::store::error::StoreError;
use crate::store::headers::encode_headers;
use crate::store::interface::{
    BoxFuture, Claim, ClaimRequest, Completion, Lease, Record, RecordState, Store, new_operation_id,
};

/// The answer to a lease that no longer owns its record.
fn fenced_out(lease: &Lease) -> StoreError {
    StoreError::FencedOut {
        key_hash: lease.key.hash_hex().to_string(),
        fence: lease.fence,
    }
}

impl Store for RedisStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn claim<'a>(&'a self, req: &'a ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            req.validate()?;
            let operation_id = new_operation_id()?;
            let mut cmd = self.script(&CLAIM, req.key, true);
            cmd.arg(req.key.readable())
                .arg(req.request_hash.to_string())
                .arg(&operation_id)
                .arg(self.now_arg())
                .arg(duration_millis(req.lease))
                .arg(duration_millis(req.ttl))
                .arg(self.margin_ms())
                .arg(req.key.hash_hex().to_string())
                .arg(req.remember_param());
            let (out, behind) = self.call_durable(&CLAIM, &cmd, "claim").await?;
            let bad = |detail: &str| StoreError::corrupt(Some(req.key), detail);
            let items = array(out).ok_or_else(|| bad("unexpected reply to the claim script"))?;
            match items.first().and_then(int) {
                Some(1) => {
                    let field = |i: usize| items.get(i).and_then(int);
                    let (Some(fence), Some(lease_until), Some(expire_at), Some(took_over)) =
                        (field(1), field(3), field(4), field(5))
                    else {
                        return Err(bad("unexpected reply to the claim script"));
                    };
                    let operation_id = items
                        .get(2)
                        .and_then(text)
                        .ok_or_else(|| bad("operation_id"))?;
                    let lease = Lease {
                        key: req.key.clone(),
                        request_hash: req.request_hash,
                        fence: u64::try_from(fence).map_err(|_| bad("fence"))?,
                        operation_id,
                        lease_until: Timestamp::from_millis(lease_until),
                        expire_at: Timestamp::from_millis(expire_at),
                        took_over: took_over == 1,
                    };
                    if let Some(behind) = behind {
                        // The handler has not started: ending the lease keeps the record and
                        // its operation id (nothing is deleted), so that the retry takes over
                        // at once, or claims afresh if a failover lost this claim, which no
                        // effect depends on. Best effort: an unended lease only makes the
                        // retry wait for it.
                        let _ = self.abandon(&lease).await;
                        return Err(StoreError::unavailable(behind));
                    }
                    Ok(Claim::Acquired(lease))
                }
                Some(2) => {
                    let request_hash = items
                        .get(1)
                        .and_then(text)
                        .and_then(|h| h.parse().ok())
                        .ok_or_else(|| bad("request_hash"))?;
                    let retry_after = items.get(2).and_then(int).ok_or_else(|| bad("lease"))?;
                    Ok(Claim::InProgress {
                        request_hash,
                        retry_after: Duration::from_millis(retry_after.max(0) as u64),
                    })
                }
                Some(3) => {
                    let (record, now) = decode_record(req.key, &items[1..])?;
                    let record = record.ok_or_else(|| bad("vanished"))?;
                    Ok(if record.is_remembered(now) {
                        Claim::Remembered(record)
                    } else {
                        Claim::Completed(record)
                    })
                }
                _ => Err(bad(&items.get(1).and_then(text).unwrap_or_else(|| {
                    "unexpected reply to the claim script".to_owned()
                }))),
            }
        })
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        completion: &'a Completion,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            completion.validate()?;
            // Redis keeps at most 512 MiB in one string (`proto-max-bulk-len`): a larger
            // result would be refused the same way on every try.
            completion.fits(512 << 20)?;
            let state = RecordState::from(completion.outcome).code();
            let mut cmd = self.script(&COMPLETE, &lease.key, true);
            cmd.arg(lease.fence)
                .arg(&lease.operation_id)
                .arg(state)
                .arg(completion.status)
                .arg(encode_headers(&completion.headers))
                .arg(&completion.body[..])
                .arg(if completion.biz_no.is_some() {
                    "1"
                } else {
                    "0"
                })
                .arg(completion.biz_no.as_deref().unwrap_or(""))
                .arg(
                    completion
                        .expire_at
                        .map(|t| t.as_millis().to_string())
                        .unwrap_or_default(),
                )
                .arg(self.now_arg())
                .arg(self.margin_ms())
                .arg(lease.key.hash_hex().to_string());
            let (out, behind) = self.call_durable(&COMPLETE, &cmd, "completion").await?;
            match int(&out) {
                Some(1 | 2) => behind.map_or(Ok(()), |b| Err(StoreError::unavailable(b))),
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut cmd = self.script(&RELEASE, &lease.key, true);
            cmd.arg(lease.fence)
                .arg(&lease.operation_id)
                .arg(lease.key.hash_hex().to_string());
            match int(&self.call(&RELEASE, &cmd).await?) {
                Some(1) => Ok(()),
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn abandon<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut cmd = self.script(&ABANDON, &lease.key, false);
            cmd.arg(lease.fence)
                .arg(&lease.operation_id)
                .arg(self.now_arg());
            match int(&self.call(&ABANDON, &cmd).await?) {
                Some(1) => Ok(()),
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn extend<'a>(
        &'a self,
        lease: &'a Lease,
        by: Duration,
    ) -> BoxFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move {
            let mut cmd = self.script(&EXTEND, &lease.key, true);
            cmd.arg(lease.fence)
                .arg(&lease.operation_id)
                .arg(duration_millis(by))
                .arg(self.now_arg())
                .arg(self.margin_ms())
                .arg(lease.key.hash_hex().to_string());
            let (out, behind) = self.call_durable(&EXTEND, &cmd, "lease extension").await?;
            let items = array(out).unwrap_or_default();
            match (
                items.first().and_then(int),
                items.get(1).and_then(int),
                items.get(2).and_then(int),
            ) {
                (Some(1), Some(lease_until), Some(expire_at)) => match behind {
                    Some(behind) => Err(StoreError::unavailable(behind)),
                    None => Ok(Lease {
                        lease_until: Timestamp::from_millis(lease_until),
                        expire_at: Timestamp::from_millis(expire_at),
                        ..lease.clone()
                    }),
                },
                _ => Err(fenced_out(lease)),
            }
        })
    }

    fn get<'a>(&'a self, key: &'a ScopedKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(async move { Ok(self.get_with_now(key).await?.map(|(record, _)| record)) })
    }

    fn get_with_now<'a>(
        &'a self,
        key: &'a ScopedKey,
    ) -> BoxFuture<'a, Result<Option<(Record, Timestamp)>, StoreError>> {
        Box::pin(async move {
            let mut cmd = self.script(&GET, key, false);
            cmd.arg(self.now_arg());
            let items = array(self.call(&GET, &cmd).await?).ok_or_else(|| {
                StoreError::corrupt(Some(key), "unexpected reply to the read script")
            })?;
            let (record, now) = decode_record(key, &items)?;
            Ok(record.filter(|r| !r.is_expired(now)).map(|r| (r, now)))
        })
    }

    /// On one server, deletes up to `batch` expired records along the index. On a cluster
    /// there is no index to walk, and nothing to do: Redis deletes every record by itself
    /// [the expiry margin](RedisStore::with_expiry_margin) after its `expire_at`, on every
    /// shard at once, and an expired record is absent to every operation meanwhile. Answers 0
    /// there.
    fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let (Some(index), Some(responses)) = (&self.index, &self.responses) else {
                return Ok(0);
            };
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(PURGE.get_hash())
                .arg(2)
                .arg(&**index)
                .arg(&**responses)
                .arg(self.now_arg())
                .arg(batch.max(1))
                .arg(&*self.records);
            int(&self.call(&PURGE, &cmd).await?)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| StoreError::Other("unexpected reply to the purge script".into()))
        })
    }

    /// On one server, frees the responses of up to `batch` remembered records past their TTL
    /// along the index of remembered responses. On a cluster (no index) it answers 0: a
    /// remembered record keeps its response until Redis deletes the record at its
    /// `expire_at` (it is never replayed past its TTL all the same).
    fn purge_responses(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let Some(responses) = &self.responses else {
                return Ok(0);
            };
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(PURGE_RESPONSES.get_hash())
                .arg(1)
                .arg(&**responses)
                .arg(self.now_arg())
                .arg(batch.max(1))
                .arg(&*self.records);
            int(&self.call(&PURGE_RESPONSES, &cmd).await?)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| {
                    StoreError::Other("unexpected reply to the response purge script".into())
                })
        })
    }

    /// Refuses a server (or a cluster node) that evicts keys, warns about persistence settings
    /// that lose acknowledged claims on a crash, about a cluster prefix that puts every record
    /// on one shard, and loads the scripts. A server that forbids `CONFIG` (some managed
    /// services) is only warned about.
    fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            for policy in self.config("maxmemory-policy").await?.into_iter().flatten() {
                if policy != "noeviction" {
                    return Err(StoreError::Config {
                        message: format!(
                            "Redis evicts keys (`maxmemory-policy {policy}`): an evicted record lets a retry run its operation again; set `maxmemory-policy noeviction`"
                        ),
                        source: None,
                    });
                }
            }
            let appendonly = self.config("appendonly").await?;
            let fsync = self.config("appendfsync").await?;
            if appendonly.iter().any(|a| a.as_deref() == Some("no"))
                || fsync.iter().flatten().any(|f| f != "always")
            {
                let show = |v: &[Option<String>]| {
                    v.iter()
                        .map(|v| v.as_deref().unwrap_or("?"))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                tracing::warn!(target: "idem",
                    appendonly = show(&appendonly),
                    appendfsync = show(&fsync),
                    "Redis may lose acknowledged claims and completions on a crash, and a lost one lets a retry run its operation again: `appendonly yes` and `appendfsync always` keep them (docs/storage.md, \"Redis / Valkey\")");
            }
            if self.is_cluster() && self.records.contains('{') {
                tracing::warn!(target: "idem", prefix = &*self.records,
                    "the key prefix holds a hash tag: every record of this store lands in one slot, on one shard of the cluster; drop the braces to spread them");
            }
            let mut conn = self.conn.clone();
            for script in [
                &*CLAIM,
                &*COMPLETE,
                &*RELEASE,
                &*ABANDON,
                &*EXTEND,
                &*GET,
                &*PURGE,
                &*PURGE_RESPONSES,
            ] {
                load(script, &mut conn).await?;
            }
            Ok(())
        })
    }

    fn clock(&self) -> &dyn Clock {
        match &self.clock {
            Some(c) => &**c,
            None => &SystemClock,
        }
    }
}
