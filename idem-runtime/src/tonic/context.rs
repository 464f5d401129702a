//! [`GrpcContext`]: what the generated code of a tonic method takes from its request before the
//! method's body consumes it.

use tonic::metadata::MetadataMap;

use crate::engine::{Idem, IdempotencyError, RequestKey, ScopeTaker, default_scope_parts};
use crate::key::{InvalidKey, ScopePart, parse_header_key, validate_key};

/// What an idempotent tonic method needs from its request besides the message: the [`Idem`]
/// handle, the request metadata, the gRPC method path and the default scope.
///
/// ```
/// use idem_runtime::engine::Idem;
/// use idem_runtime::tonic::GrpcContext;
///
/// let mut request = tonic::Request::new(());
/// request.metadata_mut().insert("idempotency-key", "k-1".parse().unwrap());
/// request.extensions_mut().insert(tonic::GrpcMethod::new("payments.v1.Payments", "CreatePayment"));
/// let cx = GrpcContext::new(&Idem::new(idem_runtime::store::MemoryStore::new()), &request);
/// assert_eq!(cx.method_path().as_deref(), Some("/payments.v1.Payments/CreatePayment"));
/// assert_eq!(cx.metadata("Idempotency-Key"), Some("k-1"));
/// ```
#[derive(Debug, Clone)]
pub struct GrpcContext {
    idem: Idem,
    metadata: MetadataMap,
    method: Option<String>,
    default_scope: Option<Option<Vec<String>>>,
}

impl GrpcContext {
    /// The context of `request`, on `idem`.
    pub fn new<T>(idem: &Idem, request: &tonic::Request<T>) -> Self {
        let method = request
            .extensions()
            .get::<tonic::GrpcMethod<'static>>()
            .map(|m| format!("/{}/{}", m.service(), m.method()));
        let default_scope = idem.has_default_scope().then(|| {
            // The default scope reads HTTP request parts: the metadata are the HTTP/2 headers,
            // the extensions those the service's interceptors inserted.
            let mut parts = http::Request::new(()).into_parts().0;
            parts.method = http::Method::POST;
            if let Some(path) = method.as_deref().and_then(|p| p.parse().ok()) {
                parts.uri = path;
            }
            parts.headers = request.metadata().clone().into_headers();
            parts.extensions = request.extensions().clone();
            idem.default_scope_of(&parts).flatten()
        });
        GrpcContext {
            idem: idem.clone(),
            metadata: request.metadata().clone(),
            method,
            default_scope,
        }
    }

    /// The [`Idem`] handle.
    pub fn idem(&self) -> &Idem {
        &self.idem
    }

    /// An ASCII request metadata value (case-insensitive name); `None` when absent, binary or
    /// not visible ASCII.
    ///
    /// ```
    /// # use idem_runtime::{engine::Idem, tonic::GrpcContext};
    /// let mut request = tonic::Request::new(());
    /// request.metadata_mut().insert("x-tenant-id", "acme".parse().unwrap());
    /// let cx = GrpcContext::new(&Idem::new(idem_runtime::store::MemoryStore::new()), &request);
    /// assert_eq!(cx.metadata("X-Tenant-Id"), Some("acme"));
    /// assert_eq!(cx.metadata("x-user-id"), None);
    /// ```
    pub fn metadata(&self, name: &str) -> Option<&str> {
        self.metadata
            .get(lowercase(name).as_ref())
            .and_then(|v| v.to_str().ok())
    }

    /// The method's path, `/package.Service/Method`, from a `tonic::GrpcMethod` extension of
    /// the request (tonic's generated client sets one; its server keeps none, so a method's
    /// default operation comes from `#[idempotent]`, not from here).
    pub fn method_path(&self) -> Option<String> {
        self.method.clone()
    }

    /// The parts of the handle's default scope ([`Idem::with_default_scope`]) for this request,
    /// as for HTTP: the function is given the metadata as headers and the request's extensions.
    ///
    /// # Errors
    /// [`IdempotencyError::Unscoped`] when the request carries no identity;
    /// [`IdempotencyError::Misconfigured`] when the handle has no default scope.
    pub fn default_scope(&self) -> Result<Vec<String>, IdempotencyError> {
        let method = self.method.as_deref().unwrap_or("?");
        default_scope_parts(&self.default_scope, ScopeTaker::METHOD, method, None)
    }

    /// The client key of `source` and its scoped form; `operation` `None` names it after the
    /// method's path.
    pub(crate) fn key(
        &self,
        source: KeySource<'_>,
        operation: Option<&str>,
        scope: &[&dyn ScopePart],
    ) -> Result<RequestKey, IdempotencyError> {
        let client = match source {
            KeySource::Metadata(name) => self.metadata_key(name)?,
            KeySource::Value(value) => {
                validate_key(value)?;
                value.to_owned()
            }
        };
        let operation = match (operation, &self.method) {
            (Some(op), _) => op,
            (None, Some(path)) => path.as_str(),
            // Neither an operation nor a method path to name the operation after: one shared
            // name would let two methods' keys collide. (`#[idempotent]` always names one.)
            (None, None) => {
                tracing::error!(
                    target: "idem",
                    "a gRPC call without an operation name nor a `tonic::GrpcMethod` extension: \
                     name its operation"
                );
                return Err(IdempotencyError::Misconfigured {
                    message: "the call has no operation name and the request no `tonic::GrpcMethod` extension to name it after: name its operation",
                });
            }
        };
        Ok(RequestKey::new(operation, scope, client)?)
    }

    /// The key in metadata `name`: missing -> `MissingKey`; repeated, binary, or neither an
    /// sf-string nor a bare key -> `InvalidKey`.
    fn metadata_key(&self, name: &str) -> Result<String, IdempotencyError> {
        let lower = lowercase(name);
        let mut values = self.metadata.get_all(lower.as_ref()).iter();
        let value = values.next().ok_or_else(|| IdempotencyError::MissingKey {
            header: lower.into_owned(),
        })?;
        if values.next().is_some() {
            return Err(InvalidKey::Repeated.into());
        }
        Ok(parse_header_key(value.as_encoded_bytes())?)
    }
}

/// Where the client key of a tonic method comes from.
///
/// ```
/// use idem_runtime::tonic::KeySource;
/// let from_metadata = KeySource::Metadata("idempotency-key");
/// let request_id = String::from("6f1c..");
/// let from_message = KeySource::Value(&request_id);
/// # let _ = (from_metadata, from_message);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource<'a> {
    /// A request metadata entry (case-insensitive), parsed as an sf-string or a bare key.
    /// Missing: `INVALID_ARGUMENT`, reason `MISSING_KEY`.
    Metadata(&'static str),
    /// A value of the request message itself (an AIP-155 `request_id` field), taken as it is.
    Value(&'a str),
}

/// `name` in lowercase, the form metadata keys are stored in: copied only when it is not
/// already (the names `#[idempotent]` passes are).
fn lowercase(name: &str) -> std::borrow::Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn key_of(
        request: &tonic::Request<()>,
        operation: Option<&str>,
    ) -> Result<String, IdempotencyError> {
        let cx = GrpcContext::new(&Idem::new(MemoryStore::new()), request);
        cx.key(KeySource::Metadata("idempotency-key"), operation, &[])
            .map(|key| key.scoped().operation().to_owned())
    }

    /// The operation is the one named, else the request's method path; without either the call
    /// is refused rather than sharing a name with other methods.
    #[test]
    fn the_operation_is_the_method_path_or_named() {
        let mut request = tonic::Request::new(());
        request
            .metadata_mut()
            .insert("idempotency-key", "k-1".parse().unwrap());
        assert!(matches!(
            key_of(&request, None),
            Err(IdempotencyError::Misconfigured { .. })
        ));
        assert_eq!(
            key_of(&request, Some("billing.charge")).unwrap(),
            "billing.charge"
        );
        request.extensions_mut().insert(tonic::GrpcMethod::new(
            "payments.v1.Payments",
            "CreatePayment",
        ));
        assert_eq!(
            key_of(&request, None).unwrap(),
            "/payments.v1.Payments/CreatePayment"
        );
    }
}
