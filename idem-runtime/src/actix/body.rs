//! Reading an actix response body up to the snapshot limit, and re-joining what was read with
//! the rest of the stream.

use core::pin::Pin;
use core::task::{Context, Poll};
use std::collections::VecDeque;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::web::Bytes;

type BodyError = Box<dyn std::error::Error>;

/// A response body read up to a limit.
pub(crate) enum Captured {
    /// The whole body, at most `limit` bytes.
    Whole(Bytes),
    /// More than `limit` bytes: what was read, and the rest of the stream.
    Over { prefix: Vec<Bytes>, rest: BoxBody },
    /// The body failed after `prefix`.
    Failed {
        prefix: Vec<Bytes>,
        error: BodyError,
    },
}

/// Reads `body` until its end or until more than `limit` bytes were read. A body whose size is
/// already known to be over the limit is not read at all, unless `read_ahead` asks for its first
/// bytes (to look for the business number in them).
pub(crate) async fn capture(mut body: BoxBody, limit: usize, read_ahead: bool) -> Captured {
    if let BodySize::Sized(size) = body.size()
        && !read_ahead
        && size > limit as u64
    {
        return Captured::Over {
            prefix: Vec::new(),
            rest: body,
        };
    }
    let mut prefix = Vec::new();
    let mut len = 0usize;
    loop {
        match core::future::poll_fn(|cx| Pin::new(&mut body).poll_next(cx)).await {
            None => return Captured::Whole(concat(prefix)),
            Some(Err(error)) => return Captured::Failed { prefix, error },
            Some(Ok(data)) => {
                len = len.saturating_add(data.len());
                prefix.push(data);
                if len > limit {
                    return Captured::Over { prefix, rest: body };
                }
            }
        }
    }
}

/// Reads the rest of an over-limit body whole.
pub(crate) async fn read_rest(prefix: Vec<Bytes>, rest: BoxBody) -> Result<Bytes, Captured> {
    match capture(rest, usize::MAX, true).await {
        Captured::Whole(bytes) => {
            let mut all = prefix;
            all.push(bytes);
            Ok(concat(all))
        }
        Captured::Failed {
            prefix: read,
            error,
        } => {
            let mut all = prefix;
            all.extend(read);
            Err(Captured::Failed { prefix: all, error })
        }
        Captured::Over { .. } => unreachable!("no body is over usize::MAX bytes"),
    }
}

fn concat(mut chunks: Vec<Bytes>) -> Bytes {
    chunks.retain(|c| !c.is_empty());
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => Bytes::from(chunks.concat()),
    }
}

/// `prefix`, then `rest` (or `error`): the body the first caller gets after a partial read.
pub(crate) fn rejoin(
    prefix: Vec<Bytes>,
    rest: Option<BoxBody>,
    error: Option<BodyError>,
) -> BoxBody {
    BoxBody::new(Prefixed {
        prefix: prefix.into(),
        error,
        rest,
    })
}

struct Prefixed {
    prefix: VecDeque<Bytes>,
    error: Option<BodyError>,
    rest: Option<BoxBody>,
}

impl MessageBody for Prefixed {
    type Error = BodyError;

    fn size(&self) -> BodySize {
        let buffered: u64 = self.prefix.iter().map(|b| b.len() as u64).sum();
        match (&self.error, self.rest.as_ref().map(MessageBody::size)) {
            (None, None) => BodySize::Sized(buffered),
            (None, Some(BodySize::Sized(n))) => BodySize::Sized(n + buffered),
            (None, Some(BodySize::None)) => BodySize::Sized(buffered),
            _ => BodySize::Stream,
        }
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BodyError>>> {
        let this = self.get_mut();
        if let Some(chunk) = this.prefix.pop_front() {
            return Poll::Ready(Some(Ok(chunk)));
        }
        if let Some(error) = this.error.take() {
            return Poll::Ready(Some(Err(error)));
        }
        match this.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_next(cx),
            None => Poll::Ready(None),
        }
    }
}
