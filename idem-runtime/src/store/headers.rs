//! The response headers of a snapshot as one length-prefixed blob (column `resp_headers` of the
//! SQL stores, field `resp_headers` of the Redis store), so that names and values may contain
//! any byte.

/// Version byte of the header blob.
const HEADERS_V1: u8 = 1;

/// Encodes headers as `1, count: u32, (name_len: u32, name, value_len: u32, value)*` (big
/// endian), so that names and values may contain any byte.
pub(crate) fn encode_headers(headers: &[(String, Vec<u8>)]) -> Vec<u8> {
    let len = 5 + headers
        .iter()
        .map(|(n, v)| 8 + n.len() + v.len())
        .sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.push(HEADERS_V1);
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    for (name, value) in headers {
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// Decodes [`encode_headers`]' output; `None` for anything malformed.
/// The first `n` bytes of `b`, which moves past them; `None` when it is shorter.
pub(crate) fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if b.len() < n {
        return None;
    }
    let (head, tail) = b.split_at(n);
    *b = tail;
    Some(head)
}

/// A big-endian `u32` length taken from `b` ([`take`]).
pub(crate) fn take_u32(b: &mut &[u8]) -> Option<usize> {
    let bytes: [u8; 4] = take(b, 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(bytes) as usize)
}

pub(crate) fn decode_headers(mut b: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    if take(&mut b, 1)? != [HEADERS_V1] {
        return None;
    }
    let count = take_u32(&mut b)?;
    let mut out = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let n = take_u32(&mut b)?;
        let name = core::str::from_utf8(take(&mut b, n)?).ok()?.to_owned();
        let n = take_u32(&mut b)?;
        out.push((name, take(&mut b, n)?.to_vec()));
    }
    b.is_empty().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let h = vec![
            ("content-type".to_owned(), b"application/json".to_vec()),
            ("x-empty".to_owned(), Vec::new()),
            ("x-bin".to_owned(), vec![0, 255, 10]),
        ];
        assert_eq!(decode_headers(&encode_headers(&h)), Some(h));
        assert_eq!(decode_headers(&encode_headers(&[])), Some(vec![]));
        let mut bad = encode_headers(&[("a".to_owned(), b"b".to_vec())]);
        bad.push(0);
        assert_eq!(decode_headers(&bad), None);
        assert_eq!(decode_headers(&[]), None);
        assert_eq!(decode_headers(&[1, 0, 0, 0, 1]), None);
    }
}
