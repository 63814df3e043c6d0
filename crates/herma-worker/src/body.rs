//! A response body that says when it is gone.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body::Frame;
use tokio::sync::oneshot;

/// `inner`, then a signal once it has been dropped (read to its end, or abandoned by the
/// client): whatever dropping it queued (a sealed receipt) is queued by then.
pub struct OnEnd {
    inner: Option<Body>,
    done: Option<oneshot::Sender<()>>,
}

impl OnEnd {
    pub fn new(inner: Body, done: oneshot::Sender<()>) -> Self {
        Self {
            inner: Some(inner),
            done: Some(done),
        }
    }
}

impl Drop for OnEnd {
    fn drop(&mut self) {
        // The inner body first: its own drop may queue the receipt this signal waits for.
        drop(self.inner.take());
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

impl http_body::Body for OnEnd {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match self.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.as_ref().map_or_else(
            || http_body::SizeHint::with_exact(0),
            http_body::Body::size_hint,
        )
    }
}
