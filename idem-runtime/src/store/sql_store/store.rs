//! The [`Store`](crate::store::interface::Store) impl of every SQL store, written once.

/// Implements [`Store`](crate::store::interface::Store) for `$store`, a [`SqlBackend`]
/// (`super::SqlBackend`): `claim` and `purge_expired` are the backend's own, every other
/// operation is the generic one of `ops`. A macro rather than a blanket impl over
/// `SqlBackend`, so that the documentation lists `impl Store for PostgresStore` and names no
/// private trait.
macro_rules! impl_store {
    ($store:ty) => {
        const _: () = {
            use core::time::Duration;

            use $crate::key::ScopedKey;
            use $crate::store::clock::{Clock, Timestamp};
            use $crate::store::error::StoreError;
            use $crate::store::interface::{
                BoxFuture, Claim, ClaimRequest, Completion, Lease, Record, Store,
            };
            use $crate::store::sql_store::{SqlBackend, ops};

            impl Store for $store {
                fn backend(&self) -> &'static str {
                    <Self as SqlBackend>::NAME
                }

                fn claim<'a>(
                    &'a self,
                    req: &'a ClaimRequest<'a>,
                ) -> BoxFuture<'a, Result<Claim, StoreError>> {
                    Box::pin(
                        async move { self.claim_key(req).await.map_err(|e| e.of_record(req.key)) },
                    )
                }

                fn complete<'a>(
                    &'a self,
                    lease: &'a Lease,
                    completion: &'a Completion,
                ) -> BoxFuture<'a, Result<(), StoreError>> {
                    Box::pin(
                        async move { self.written(ops::complete(self, lease, completion).await) },
                    )
                }

                fn release<'a>(
                    &'a self,
                    lease: &'a Lease,
                ) -> BoxFuture<'a, Result<(), StoreError>> {
                    Box::pin(async move { self.written(ops::release(self.core(), lease).await) })
                }

                fn abandon<'a>(
                    &'a self,
                    lease: &'a Lease,
                ) -> BoxFuture<'a, Result<(), StoreError>> {
                    Box::pin(async move { self.written(ops::abandon(self.core(), lease).await) })
                }

                fn extend<'a>(
                    &'a self,
                    lease: &'a Lease,
                    by: Duration,
                ) -> BoxFuture<'a, Result<Lease, StoreError>> {
                    Box::pin(async move { self.written(ops::extend(self.core(), lease, by).await) })
                }

                fn get<'a>(
                    &'a self,
                    key: &'a ScopedKey,
                ) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
                    Box::pin(
                        async move { Ok(self.get_with_now(key).await?.map(|(record, _)| record)) },
                    )
                }

                fn get_with_now<'a>(
                    &'a self,
                    key: &'a ScopedKey,
                ) -> BoxFuture<'a, Result<Option<(Record, Timestamp)>, StoreError>> {
                    Box::pin(async move {
                        ops::get(self.core(), key)
                            .await
                            .map_err(|e| e.of_record(key))
                    })
                }

                fn purge_expired(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
                    Box::pin(self.purge_batch(batch))
                }

                fn purge_responses(&self, batch: u32) -> BoxFuture<'_, Result<u64, StoreError>> {
                    Box::pin(self.purge_responses_batch(batch))
                }

                fn migrate(&self) -> BoxFuture<'_, Result<(), StoreError>> {
                    Box::pin(ops::migrate(self.core()))
                }

                fn clock(&self) -> &dyn Clock {
                    self.core().clock()
                }
            }
        };
    };
}
pub(crate) use impl_store;
