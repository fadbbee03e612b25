//! Building the kube client the controller uses: kube's built-in retry layer off (DESIGN.md
//! section 2: retries are ours), and every request bounded by `--kube-request-timeout`
//! ([`RequestTimeoutLayer`]).
//!
//! kube 5 sets no read timeout by default (a watch stream must be able to stay quiet), so
//! without a bound of our own a request the API server (or a black-holed connection) never
//! answers hangs its caller forever: a held list of pods stalled discovery at start-up, a held
//! Lease renew stalled the elector. The layer bounds the time to the response headers of every
//! request, and for every request that is not a watch the whole body too; a watch stream, once
//! its headers arrived, is bounded by kube-runtime's watcher idle timeout instead. A timed-out
//! request fails with [`RequestTimedOut`] (`kube::Error::Service`), which every caller treats as
//! the API being unreachable: retried with its backoff (core/error.rs, `Unreachable`).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::BoxError;

/// Default of `--kube-request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors building a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The kubeconfig could not be read or used.
    #[error("cannot load kubeconfig")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// The identity makes an invalid `User-Agent` header.
    #[error("the identity in user agent {0:?} is not a valid header value: use printable ascii")]
    UserAgent(String),
    /// The client could not be built.
    #[error("cannot build kube client")]
    Build(#[source] kube::Error),
}

/// The `User-Agent` of a replica: `haptic/<version> (<identity>)`.
#[must_use]
pub fn user_agent(identity: &str) -> String {
    format!("haptic/{} ({identity})", env!("CARGO_PKG_VERSION"))
}

/// A client from `config` with `default_retry = false`, `user_agent` as the `User-Agent` and
/// every request bounded by `timeout` ([`RequestTimeoutLayer`]).
///
/// # Errors
/// [`ClientError::Build`] when the client cannot be built, [`ClientError::UserAgent`] for an
/// identity that is not a valid header value.
pub fn build(
    mut config: kube::Config,
    user_agent: &str,
    timeout: Duration,
) -> Result<kube::Client, ClientError> {
    config.default_retry = false;
    let value = http::HeaderValue::from_str(user_agent)
        .map_err(|_| ClientError::UserAgent(user_agent.to_owned()))?;
    config.headers.push((http::header::USER_AGENT, value));
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(ClientError::Build)?
        .with_layer(&RequestTimeoutLayer::new(timeout))
        .build())
}

/// A request of the kube client got no complete answer within `--kube-request-timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("kubernetes api request timed out after {after:?} (--kube-request-timeout)")]
pub struct RequestTimedOut {
    /// The timeout.
    pub after: Duration,
}

/// A tower layer bounding each request of the kube client: the response headers must arrive
/// within the timeout, and for a request that is not a watch (`watch=true`) the whole body too.
#[derive(Debug, Clone, Copy)]
pub struct RequestTimeoutLayer {
    timeout: Duration,
}

impl RequestTimeoutLayer {
    /// A layer with `timeout` per request (at least 1 ms).
    #[must_use]
    pub fn new(timeout: Duration) -> Self {
        RequestTimeoutLayer {
            timeout: timeout.max(Duration::from_millis(1)),
        }
    }
}

impl<S> tower::Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> RequestTimeout<S> {
        RequestTimeout {
            inner,
            timeout: self.timeout,
        }
    }
}

/// The service of [`RequestTimeoutLayer`].
#[derive(Debug, Clone)]
pub struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
}

/// Whether a request is a watch (its stream may stay quiet for minutes).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for RequestTimeout<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    ResBody: http_body::Body + Unpin,
    ResBody::Error: Into<BoxError>,
{
    type Response = http::Response<TimedBody<ResBody>>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn Future<Output = Result<http::Response<TimedBody<ResBody>>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let watch = is_watch(req.uri());
        let after = self.timeout;
        let deadline = tokio::time::Instant::now() + after;
        let fut = self.inner.call(req);
        Box::pin(async move {
            match tokio::time::timeout_at(deadline, fut).await {
                Err(_) => Err(Box::new(RequestTimedOut { after }) as BoxError),
                Ok(Err(e)) => Err(e.into()),
                Ok(Ok(resp)) => Ok(resp.map(|body| TimedBody {
                    body,
                    deadline: (!watch).then(|| Box::pin(tokio::time::sleep_until(deadline))),
                    after,
                })),
            }
        })
    }
}

/// A response body that fails with [`RequestTimedOut`] once its deadline passed (none for a
/// watch stream).
#[derive(Debug)]
pub struct TimedBody<B> {
    body: B,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    after: Duration,
}

impl<B> http_body::Body for TimedBody<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if let Some(d) = this.deadline.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(Box::new(RequestTimedOut { after: this.after }))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The configuration of a kubeconfig file's current context.
///
/// # Errors
/// [`ClientError::Kubeconfig`] when the file is unreadable or invalid.
pub async fn load_kubeconfig(path: &Path) -> Result<kube::Config, ClientError> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(ClientError::Kubeconfig)?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(ClientError::Kubeconfig)
}

/// A client from a kubeconfig file with `default_retry = false` and the default request timeout
/// ([`DEFAULT_REQUEST_TIMEOUT`]).
///
/// # Errors
/// [`ClientError`] when the file is unreadable or invalid.
///
/// # Cancel safety
/// Cancel safe (no side effects).
pub async fn from_kubeconfig(path: &Path) -> Result<kube::Client, ClientError> {
    let mut cfg = load_kubeconfig(path).await?;
    cfg.default_retry = false;
    Ok(kube::client::ClientBuilder::try_from(cfg)
        .map_err(ClientError::Build)?
        .with_layer(&RequestTimeoutLayer::new(DEFAULT_REQUEST_TIMEOUT))
        .build())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use tower::{Layer as _, ServiceExt as _};

    /// A body that sends `head` (if any), then nothing, ever.
    #[derive(Debug)]
    struct Stalled(Option<&'static [u8]>);

    impl http_body::Body for Stalled {
        type Data = &'static [u8];
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<&'static [u8]>, Self::Error>>> {
            match self.0.take() {
                Some(head) => Poll::Ready(Some(Ok(http_body::Frame::data(head)))),
                None => Poll::Pending,
            }
        }
    }

    async fn frames(body: &mut TimedBody<Stalled>) -> Result<usize, BoxError> {
        let mut n = 0;
        loop {
            let next = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
            match next {
                Some(Ok(_)) => n += 1,
                Some(Err(e)) => return Err(e),
                None => return Ok(n),
            }
        }
    }

    fn request(uri: &str) -> http::Request<()> {
        http::Request::get(uri).body(()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_never_answered_times_out() {
        let never = tower::service_fn(|_: http::Request<()>| {
            std::future::pending::<Result<http::Response<Stalled>, BoxError>>()
        });
        let svc = RequestTimeoutLayer::new(Duration::from_secs(2)).layer(never);
        let started = tokio::time::Instant::now();
        let e = svc.oneshot(request("/api/v1/pods")).await.unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        let t = e.downcast_ref::<RequestTimedOut>().unwrap();
        assert_eq!(t.after, Duration::from_secs(2));
        assert!(e.to_string().contains("--kube-request-timeout"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_times_out_but_a_quiet_watch_does_not() {
        let stalls = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, BoxError>(http::Response::new(Stalled(Some(b"{\"items\":["))))
        });
        let layer = RequestTimeoutLayer::new(Duration::from_secs(2));
        let resp = layer
            .layer(stalls)
            .oneshot(request("/api/v1/pods?limit=500"))
            .await
            .unwrap();
        let mut body = resp.into_body();
        let e = frames(&mut body).await.unwrap_err();
        assert!(e.is::<RequestTimedOut>(), "{e}");

        let resp = layer
            .layer(stalls)
            .oneshot(request("/api/v1/pods?&watch=true&timeoutSeconds=290"))
            .await
            .unwrap();
        let mut body = resp.into_body();
        let quiet = tokio::time::timeout(Duration::from_secs(600), frames(&mut body)).await;
        assert!(quiet.is_err(), "a watch stream may stay quiet: {quiet:?}");
    }
}
