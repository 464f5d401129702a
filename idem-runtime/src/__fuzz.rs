//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): crate-private functions
//! whose input comes from outside, forwarded unchanged. Not a public API: no semver guarantees,
//! and nothing here is meant for applications.

/// The stores' decoder of the stored response-header blob (`store::headers`): `None` for
/// anything that [`encode_headers`] did not write.
pub fn decode_headers(blob: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    crate::store::headers::decode_headers(blob)
}

/// The stores' encoder of response headers into one blob (`store::headers`).
pub fn encode_headers(headers: &[(String, Vec<u8>)]) -> Vec<u8> {
    crate::store::headers::encode_headers(headers)
}
