//! [`GrpcMessage`]: the response message of an idempotent tonic method.

use crate::engine::Snapshot;

/// The response message of an idempotent tonic method: a prost message (stored as its protobuf
/// encoding and decoded again on replay) that carries its business number (S11).
///
/// Implemented for every `prost::Message + Default` that implements [`Snapshot`]: put
/// `#[derive(idem::Snapshot)]` on the message with `tonic_prost_build`'s `type_attribute`, and
/// `#[snapshot(biz_no)]` on its id field with `field_attribute`.
#[diagnostic::on_unimplemented(
    message = "the response message `{Self}` carries no business number (biz_no)",
    note = "a replay without the business number sends callers into an 'order again' branch (rule S11 of docs/contract.md in idem's repository): derive `idem::Snapshot` on the message (`.type_attribute(\"pkg.Message\", \"#[derive(idem::Snapshot)]\")` in build.rs) and mark its id field `#[snapshot(biz_no)]` (`.field_attribute(\"pkg.Message.id\", \"#[snapshot(biz_no)]\")`)"
)]
pub trait GrpcMessage: prost::Message + Default + Snapshot + Send + 'static {}

impl<T: prost::Message + Default + Snapshot + Send + 'static> GrpcMessage for T {}
