//! `ResponseFuture`: what [`RateLimitService`](super::RateLimitService)
//! returns.

use std::fmt;
use std::future::{Future, Ready};
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

/// The check and the inner call, boxed together.
pub(crate) type Checked<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project! {
    /// The response future of [`RateLimitService`](super::RateLimitService).
    ///
    /// Requests that are not checked cost no allocation here: a request
    /// refused for lack of a key is answered at once, and one let through
    /// ([`MissingKey::Pass`](super::MissingKey::Pass)) polls the inner
    /// service's future in place. A checked request polls one boxed future
    /// (see the comment in `call` for why it must be boxed).
    pub struct ResponseFuture<F: Future> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F: Future> {
        Checked { future: Checked<F::Output> },
        Passed { #[pin] future: F },
        Refused { future: Ready<F::Output> },
    }
}

impl<F: Future> ResponseFuture<F> {
    pub(crate) fn checked(future: Checked<F::Output>) -> Self {
        ResponseFuture {
            kind: Kind::Checked { future },
        }
    }

    pub(crate) fn passed(future: F) -> Self {
        ResponseFuture {
            kind: Kind::Passed { future },
        }
    }

    pub(crate) fn refused<R, E>(response: R) -> Self
    where
        F: Future<Output = Result<R, E>>,
    {
        ResponseFuture {
            kind: Kind::Refused {
                future: std::future::ready(Ok(response)),
            },
        }
    }
}

impl<F: Future> Future for ResponseFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.project().kind.project() {
            KindProj::Checked { future } => future.as_mut().poll(cx),
            KindProj::Passed { future } => future.poll(cx),
            KindProj::Refused { future } => Pin::new(future).poll(cx),
        }
    }
}

impl<F: Future> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Checked { .. } => "checked",
            Kind::Passed { .. } => "passed",
            Kind::Refused { .. } => "refused",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}
