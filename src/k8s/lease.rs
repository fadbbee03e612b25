//! Leader election on a `coordination.k8s.io/v1` Lease, with terms and fencing (DESIGN.md J7, J9).
//!
//! ```text
//!  candidate --GET lease--> free / expired (no change observed for leaseDuration) / own?
//!     --replace with resourceVersion, holder = me, leaseTransitions + 1--> leader, term = leaseTransitions
//!        (409: someone else won; stay candidate, retry every retry_period)
//!  leader --every retry_period: read; holder = me and leaseTransitions = term (at any
//!          resourceVersion: a renew whose answer was lost may have moved it)?
//!          replace with the read resourceVersion, renewTime = now-->
//!     ok: guard valid until renewed_at + duration - margin
//!     409 / error: retry next period
//!     holder or term changed / no success within renew_deadline --> LostLeadership, candidate again
//!  cancel --> release (holder cleared) if leader, LostLeadership{released}
//! ```
//!
//! A small implementation instead of `kube-lease-manager` (ecosystem.md B.3), because fencing
//! needs what that crate does not give: every write is conditional on the resourceVersion (two
//! candidates can never both win), the term (`leaseTransitions`) grows on *every* acquisition,
//! re-acquiring our own expired Lease included, and the leader knows exactly when its last renew
//! succeeded, which [`LeaseGuard::is_valid`] needs. Expiry of another holder is judged on our own
//! monotonic clock from when we last saw its record change (client-go's observedTime), so clock
//! skew between nodes does not matter.
//!
//! # Inputs
//! The Lease object; `cancel` to release.
//!
//! # Effects
//! `BecameLeader{term}` and `LostLeadership{reason}` on the caller's channel (reasons:
//! `lease_lost`, `renew_deadline_exceeded`, `released`).
//!
//! # Journal records
//! `leader.became`, `leader.lost` (journaled by the receiver, which also writes the term to meta).
//!
//! # Metrics
//! None yet; [`LeaseGuard::term`] is the current term.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use haptic_journal::{Correlation, Event, Identity, Term};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::dispatch::input::{Input, InputSender, SinkClosed, new_event_id};

/// Settings of a [`LeaderElector`].
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Lease name (`--lease-name`).
    pub name: String,
    /// This replica's identity ([`default_identity`]).
    pub identity: String,
    /// How long a Lease is valid after its last renew (`--lease-duration`). Default: 15 s.
    pub duration: Duration,
    /// A leader that has not renewed for this long gives up. Default: 10 s.
    pub renew_deadline: Duration,
    /// Interval of acquire and renew attempts. Default: 2 s.
    pub retry_period: Duration,
    /// Safety margin of [`LeaseGuard::is_valid`]: renewed_at + duration - margin > now.
    /// Default: 5 s (duration - renew deadline), so a leader stops acting before a successor can
    /// take over even with a late renew in flight.
    pub margin: Duration,
}

impl LeaseConfig {
    /// The defaults (15 s / renew 10 s / retry 2 s / margin 5 s).
    #[must_use]
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            margin: Duration::from_secs(5),
        }
    }
}

/// A [`LeaseConfig`] whose timings cannot fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseConfigError {
    /// Timings out of order.
    #[error(
        "lease timings must satisfy retry period < renew deadline < duration and 0 < margin <          duration (got retry {retry:?}, renew deadline {renew_deadline:?}, duration {duration:?},          margin {margin:?})"
    )]
    Timings {
        /// Retry period.
        retry: Duration,
        /// Renew deadline.
        renew_deadline: Duration,
        /// Lease duration.
        duration: Duration,
        /// Guard margin.
        margin: Duration,
    },
    /// An empty name or identity.
    #[error("the lease name and the identity must not be empty")]
    Empty,
}

impl LeaseConfig {
    /// Checks the settings before the elector starts.
    ///
    /// # Errors
    /// [`LeaseConfigError::Timings`] unless retry < renew deadline < duration and
    /// 0 < margin < duration; [`LeaseConfigError::Empty`] for an empty name or identity.
    pub fn check(&self) -> Result<(), LeaseConfigError> {
        if self.name.is_empty() || self.identity.is_empty() {
            return Err(LeaseConfigError::Empty);
        }
        let ordered = self.retry_period < self.renew_deadline
            && self.renew_deadline < self.duration
            && !self.margin.is_zero()
            && self.margin < self.duration;
        if ordered {
            Ok(())
        } else {
            Err(LeaseConfigError::Timings {
                retry: self.retry_period,
                renew_deadline: self.renew_deadline,
                duration: self.duration,
                margin: self.margin,
            })
        }
    }
}

/// The identity: `--identity` when given, else `POD_NAME`, else the hostname, else `haptic`.
#[must_use]
pub fn default_identity(flag: Option<&str>) -> String {
    flag.map(str::to_owned)
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "haptic".to_owned())
}

/// Errors that end [`LeaderElector::run`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The dispatcher's channel closed.
    #[error(transparent)]
    SinkClosed(#[from] SinkClosed),
}

/// The fencing check before an external write: is this replica's leadership still valid?
#[derive(Debug, Clone)]
pub struct LeaseGuard {
    state: Arc<Mutex<GuardState>>,
    duration: Duration,
    margin: Duration,
}

#[derive(Debug, Default)]
struct GuardState {
    /// `Some` while leader: the term and when the last successful write was sent.
    held: Option<(Term, Instant)>,
}

/// The guard refused: not leader, or the Lease may have expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not the leader with a valid lease")]
pub struct NotLeader;

impl LeaseGuard {
    fn new(duration: Duration, margin: Duration) -> Self {
        LeaseGuard {
            state: Arc::new(Mutex::new(GuardState::default())),
            duration,
            margin,
        }
    }

    fn set(&self, held: Option<(Term, Instant)>) {
        if let Ok(mut s) = self.state.lock() {
            s.held = held;
        }
    }

    /// The current term when leader with a valid Lease: renewed_at + duration - margin > now.
    ///
    /// # Errors
    /// [`NotLeader`] otherwise; the caller must stop acting at once.
    pub fn check(&self) -> Result<Term, NotLeader> {
        let held = self.state.lock().map_err(|_| NotLeader)?.held;
        match held {
            Some((term, renewed_at))
                if renewed_at + self.duration.saturating_sub(self.margin) > Instant::now() =>
            {
                Ok(term)
            }
            _ => Err(NotLeader),
        }
    }

    /// Whether [`LeaseGuard::check`] passes now.
    #[must_use]
    pub fn is_valid(&self) -> bool {
        self.check().is_ok()
    }

    /// The term while leader (valid or not), `None` as follower.
    #[must_use]
    pub fn term(&self) -> Option<Term> {
        self.state.lock().ok().and_then(|s| s.held.map(|(t, _)| t))
    }
}

/// One candidate in the election.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    guard: LeaseGuard,
    /// The newest term this replica already knows (its journal's); every acquisition takes a
    /// term above it, also when the Lease was deleted or recreated (J7: the term must grow).
    term_floor: Arc<dyn Fn() -> u64 + Send + Sync>,
}

debug_non_exhaustive!(LeaderElector, |x| "config" => x.config);

/// What the candidate last saw of another holder: (holder, renewTime, resourceVersion) and when.
type Observed = Option<((Option<String>, Option<MicroTime>, Option<String>), Instant)>;

impl LeaderElector {
    /// A candidate writing through `client` (kube's retry layer off).
    #[must_use]
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        let guard = LeaseGuard::new(config.duration, config.margin);
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            guard,
            term_floor: Arc::new(|| 0),
        }
    }

    /// Sets the term floor: each acquisition writes `leaseTransitions` = max(the Lease's + 1,
    /// `floor() + 1`), so the term grows even when the Lease object was deleted or recreated.
    #[must_use]
    pub fn with_term_floor(mut self, floor: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.term_floor = Arc::new(floor);
        self
    }

    fn next_transitions(&self, current: i32) -> i32 {
        let floor = i32::try_from((self.term_floor)()).unwrap_or(i32::MAX - 1);
        current
            .saturating_add(1)
            .max(floor.saturating_add(1))
            .max(1)
    }

    /// The fencing guard; clone it into every component that writes.
    #[must_use]
    pub fn guard(&self) -> LeaseGuard {
        self.guard.clone()
    }

    /// Runs the election until `cancel` fires: acquires, renews, rejoins after a loss, and
    /// releases the Lease at the end if held.
    ///
    /// # Errors
    /// [`LeaseError::SinkClosed`] when the receiver is gone.
    ///
    /// # Cancel safety
    /// Use `cancel` to stop; dropping the future leaves the Lease to expire.
    pub async fn run(self, sink: InputSender, cancel: CancellationToken) -> Result<(), LeaseError> {
        let mut observed: Observed = None;
        // While leader: (term, resourceVersion of our last write, last successful renew).
        let mut leading: Option<(Term, String, Instant)> = None;
        loop {
            match leading.take() {
                None => {
                    if let Some((term, rv, at)) = self.try_acquire(&mut observed).await {
                        self.guard.set(Some((term, at)));
                        tracing::info!(term = term.0, identity = %self.config.identity, "leader acquired");
                        self.send(
                            &sink,
                            Event::BecameLeader {
                                correlation: Correlation::new(new_event_id("leader")),
                                identity: Identity::new(self.config.identity.clone()),
                                term,
                            },
                        )
                        .await?;
                        leading = Some((term, rv, at));
                    }
                }
                // A renew is cut at the renew deadline (each request is also bounded by
                // `--kube-request-timeout`, in the client): a held request cannot keep the
                // elector from noticing the deadline.
                Some((term, rv, last_ok)) => match tokio::time::timeout(
                    self.config.renew_deadline.saturating_sub(last_ok.elapsed()),
                    self.renew(term, &rv),
                )
                .await
                .unwrap_or_else(|_| {
                    tracing::warn!(identity = %self.config.identity, "lease renew timed out");
                    Renew::Error
                }) {
                    Renew::Ok(rv, at) => {
                        self.guard.set(Some((term, at)));
                        leading = Some((term, rv, at));
                    }
                    Renew::Lost => {
                        self.lose(&sink, "lease_lost").await?;
                    }
                    Renew::Error if last_ok.elapsed() >= self.config.renew_deadline => {
                        self.lose(&sink, "renew_deadline_exceeded").await?;
                    }
                    Renew::Error => leading = Some((term, rv, last_ok)),
                },
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
        if let Some((_, rv, _)) = leading {
            self.guard.set(None);
            self.release(&rv).await;
            self.send(
                &sink,
                Event::LostLeadership {
                    correlation: Correlation::new(new_event_id("leader")),
                    identity: Identity::new(self.config.identity.clone()),
                    reason: "released".to_owned(),
                },
            )
            .await?;
        }
        Ok(())
    }

    async fn send(&self, sink: &InputSender, event: Event) -> Result<(), SinkClosed> {
        sink.send(Input::Event(event)).await.map_err(|_| SinkClosed)
    }

    async fn lose(&self, sink: &InputSender, reason: &str) -> Result<(), SinkClosed> {
        self.guard.set(None);
        tracing::warn!(reason, identity = %self.config.identity, "leadership lost");
        self.send(
            sink,
            Event::LostLeadership {
                correlation: Correlation::new(new_event_id("leader")),
                identity: Identity::new(self.config.identity.clone()),
                reason: reason.to_owned(),
            },
        )
        .await
    }

    fn spec(&self, transitions: i32, acquire: MicroTime, now: MicroTime) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            lease_transitions: Some(transitions),
            acquire_time: Some(acquire),
            renew_time: Some(now),
            ..LeaseSpec::default()
        }
    }

    /// One acquisition attempt; `Some((term, resourceVersion, sent_at))` when won.
    async fn try_acquire(&self, observed: &mut Observed) -> Option<(Term, String, Instant)> {
        let sent_at = Instant::now();
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let current = match self.api.get_opt(&self.config.name).await {
            Ok(c) => c,
            Err(error) => {
                tracing::warn!(error = %error, "lease read failed");
                return None;
            }
        };
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    // Terms start at 1: 0 is never a term.
                    spec: Some(self.spec(self.next_transitions(0), now.clone(), now)),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
                let key = (
                    holder.clone(),
                    spec.renew_time.clone(),
                    lease.metadata.resource_version.clone(),
                );
                let seen_at = match observed {
                    Some((k, at)) if *k == key => *at,
                    _ => {
                        *observed = Some((key, sent_at));
                        sent_at
                    }
                };
                let duration = Duration::from_secs(
                    u64::try_from(spec.lease_duration_seconds.unwrap_or(15).max(1)).unwrap_or(15),
                );
                let free = holder.is_none()
                    || holder.as_deref() == Some(self.config.identity.as_str())
                    || seen_at.elapsed() >= duration;
                if !free {
                    return None;
                }
                let transitions = self.next_transitions(spec.lease_transitions.unwrap_or(0));
                lease.spec = Some(self.spec(transitions, now.clone(), now));
                self.api
                    .replace(&self.config.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                let spec = lease.spec.unwrap_or_default();
                let term = Term(u64::try_from(spec.lease_transitions.unwrap_or(0)).unwrap_or(0));
                Some((
                    term,
                    lease.metadata.resource_version.unwrap_or_default(),
                    sent_at,
                ))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => None,
            Err(error) => {
                tracing::warn!(error = %error, "lease acquire failed");
                None
            }
        }
    }

    /// One renew of the Lease we hold in `term`, whose last write we know of is `rv`.
    ///
    /// The Lease is still ours when it names us as holder with our term's `leaseTransitions`,
    /// even at another resourceVersion: a renew of ours the API server applied but whose answer
    /// we never got (lost, or after `--kube-request-timeout`) moved it, and any other candidate
    /// that takes it writes its own identity and the next term. client-go's elector likewise
    /// renews whenever the holder is itself. A 409 on our write (our own late write landed
    /// between the read and the write, or a successor's) is an error to retry: the next read
    /// tells which, and the renew deadline still bounds how long we lead unconfirmed.
    async fn renew(&self, term: Term, rv: &str) -> Renew {
        let sent_at = Instant::now();
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return Renew::Error;
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        let ours = spec.holder_identity.as_deref() == Some(self.config.identity.as_str())
            && spec
                .lease_transitions
                .and_then(|t| u64::try_from(t).ok())
                .is_some_and(|t| t == term.0);
        if !ours {
            return Renew::Lost;
        }
        if lease.metadata.resource_version.as_deref() != Some(rv) {
            tracing::info!(
                identity = %self.config.identity,
                term = term.0,
                "the Lease moved to another resourceVersion and still names us in our term (a \
                 renew whose answer was lost landed): renewing it"
            );
        }
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(l) => Renew::Ok(l.metadata.resource_version.unwrap_or_default(), sent_at),
            Err(error) => {
                tracing::warn!(error = %error, "lease renew failed");
                Renew::Error
            }
        }
    }

    async fn release(&self, rv: &str) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        if lease.metadata.resource_version.as_deref() != Some(rv) {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = None;
            spec.acquire_time = None;
        }
        if let Err(error) = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(error = %error, "lease release failed");
        } else {
            tracing::info!(identity = %self.config.identity, "lease released");
        }
    }
}

enum Renew {
    Ok(String, Instant),
    Lost,
    Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_consistent_and_bad_timings_are_refused() {
        let mut c = LeaseConfig::new("ns", "lease", "me");
        assert_eq!(c.check(), Ok(()));
        c.renew_deadline = Duration::from_secs(20);
        assert!(matches!(c.check(), Err(LeaseConfigError::Timings { .. })));
        assert_eq!(
            LeaseConfig::new("ns", "lease", "").check(),
            Err(LeaseConfigError::Empty)
        );
    }

    #[test]
    fn guard_is_valid_only_within_the_margin() {
        let g = LeaseGuard::new(Duration::from_secs(15), Duration::from_secs(5));
        assert_eq!(g.check(), Err(NotLeader));
        g.set(Some((Term(3), Instant::now())));
        assert_eq!(g.check(), Ok(Term(3)));
        let old = Instant::now().checked_sub(Duration::from_secs(11));
        if let Some(old) = old {
            g.set(Some((Term(3), old)));
            assert_eq!(g.check(), Err(NotLeader));
            assert_eq!(g.term(), Some(Term(3)));
        }
    }
}
