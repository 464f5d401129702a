//! Buffering a response body up to the snapshot limit, and re-joining what was buffered with the
//! rest of the stream.

use core::pin::Pin;
use core::task::{Context, Poll};
use std::collections::VecDeque;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

/// A response body read up to a limit.
pub(crate) enum Captured {
    /// The whole body, at most `limit` bytes.
    Whole(Bytes),
    /// More than `limit` bytes: what was read, and the rest of the stream.
    Over { prefix: Vec<Bytes>, rest: Body },
    /// The body failed after `prefix`.
    Failed {
        prefix: Vec<Bytes>,
        error: axum::Error,
    },
}

/// Reads `body` until its end or until more than `limit` bytes were read. Trailers are dropped.
/// A body whose size hint is already over the limit is not read at all, unless `read_ahead` asks
/// for its first bytes (to look for the business number in them).
pub(crate) async fn capture(mut body: Body, limit: usize, read_ahead: bool) -> Captured {
    if !read_ahead && body.size_hint().lower() > limit as u64 {
        return Captured::Over {
            prefix: Vec::new(),
            rest: body,
        };
    }
    let mut prefix = Vec::new();
    let mut len = 0usize;
    loop {
        match body.frame().await {
            None => return Captured::Whole(concat(prefix)),
            Some(Err(error)) => return Captured::Failed { prefix, error },
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    len = len.saturating_add(data.len());
                    prefix.push(data);
                    if len > limit {
                        return Captured::Over { prefix, rest: body };
                    }
                }
            }
        }
    }
}

/// Reads the rest of an over-limit body whole.
pub(crate) async fn read_rest(prefix: Vec<Bytes>, rest: Body) -> Result<Bytes, Captured> {
    match rest.collect().await {
        Ok(collected) => {
            let mut all = prefix;
            all.push(collected.to_bytes());
            Ok(concat(all))
        }
        Err(error) => Err(Captured::Failed { prefix, error }),
    }
}

pub(crate) fn concat(mut chunks: Vec<Bytes>) -> Bytes {
    chunks.retain(|c| !c.is_empty());
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut out = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for c in chunks {
                out.extend_from_slice(&c);
            }
            out.freeze()
        }
    }
}

/// `prefix`, then `rest` (or `error`): the response the first caller gets after a partial read.
pub(crate) fn rejoin(prefix: Vec<Bytes>, rest: Option<Body>, error: Option<axum::Error>) -> Body {
    Body::new(Prefixed {
        prefix: prefix.into(),
        error,
        rest,
    })
}

struct Prefixed {
    prefix: VecDeque<Bytes>,
    error: Option<axum::Error>,
    rest: Option<Body>,
}

impl HttpBody for Prefixed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Some(chunk) = this.prefix.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if let Some(error) = this.error.take() {
            return Poll::Ready(Some(Err(error)));
        }
        match this.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty()
            && self.error.is_none()
            && self.rest.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let buffered: u64 = self.prefix.iter().map(|b| b.len() as u64).sum();
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint);
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + buffered);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + buffered);
        }
        hint
    }
}
