//! The flags of `haptic run` (STYLE.md 2.9): every flag is `long` and has an `env = "HAPTIC_..."`
//! twin; durations use humantime syntax (`2s`, `1m30s`, `500ms`). The flags named in issue 6
//! "Stable interfaces" are a stable interface: keep them. Parsed by `cli::Cli`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// Where renders come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceKind {
    /// A directory watched for changes (`--render-dir`).
    Dir,
    /// A ConfigMap (`--configmap`), plus an optional Secret for certificates.
    Configmap,
}

/// What to do with a journal that cannot be opened (DESIGN.md J10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JournalRecovery {
    /// Stop with a message naming the problem and the fix.
    Refuse,
    /// Move the damaged file aside (`<journal>.damaged-<unix ms>`) and start empty; state is
    /// recovered from the cluster and the pods (DESIGN.md J9).
    Rebuild,
}

/// How the journal file is shared (DESIGN.md section 2, `haptic_journal::Concurrency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JournalConcurrency {
    /// This process alone has the file (one fsync per commit). The default.
    Exclusive,
    /// This process writes; read-only inspectors (`haptic-journalctl`) may open the live file
    /// (two fsyncs per commit; needs byte-range locks, so no NFS).
    SingleWriter,
}

pub use crate::telemetry::LogFormat;

/// Flags of `haptic run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Kubeconfig file; in-cluster configuration when absent.
    #[arg(long, env = "HAPTIC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the HAProxy pods, the Lease, the published objects and the sources
    /// (default: the kubeconfig context's namespace, or the pod's own namespace in-cluster).
    #[arg(long, env = "HAPTIC_NAMESPACE")]
    pub namespace: Option<String>,
    /// The journal file (created 0600 when absent; its directory must exist or be creatable).
    #[arg(
        long,
        env = "HAPTIC_JOURNAL",
        default_value = "/var/lib/haptic/journal.redb"
    )]
    pub journal: PathBuf,
    /// A journal that cannot be opened: `refuse` (stop) or `rebuild` (move it aside, start empty).
    #[arg(long, env = "HAPTIC_JOURNAL_RECOVERY", value_enum, default_value_t = JournalRecovery::Refuse)]
    pub journal_recovery: JournalRecovery,
    /// Journal sharing: `exclusive`, or `single-writer` to let `haptic-journalctl` read the live file.
    #[arg(long, env = "HAPTIC_JOURNAL_CONCURRENCY", value_enum, default_value_t = JournalConcurrency::Exclusive)]
    pub journal_concurrency: JournalConcurrency,
    /// Render source.
    #[arg(long, env = "HAPTIC_SOURCE", value_enum, default_value_t = SourceKind::Dir)]
    pub source: SourceKind,
    /// Render directory (`--source dir`): `haproxy.cfg` plus `maps/`, `ssl/`, `ca/`, `general/`,
    /// `crt-lists/`.
    #[arg(long, env = "HAPTIC_RENDER_DIR")]
    pub render_dir: Option<PathBuf>,
    /// ConfigMap holding the render (`--source configmap`).
    #[arg(long, env = "HAPTIC_CONFIGMAP")]
    pub configmap: Option<String>,
    /// Optional Secret with the render's certificates and keys (`--source configmap`).
    #[arg(long, env = "HAPTIC_CONFIGMAP_SECRET")]
    pub configmap_secret: Option<String>,
    /// Address of the HTTP ingest endpoint (leader only; off when absent).
    #[arg(long, env = "HAPTIC_INGEST_ADDR")]
    pub ingest_addr: Option<SocketAddr>,
    /// Secret holding the ingest bearer token under the key `token` (required with `--ingest-addr`).
    #[arg(long, env = "HAPTIC_INGEST_TOKEN_SECRET")]
    pub ingest_token_secret: Option<String>,
    /// Name of the config this controller serves (default: the ConfigMap's name, the render
    /// directory's base name, or `haptic`); the HAProxyCfg is `<config-name>-haproxycfg`.
    #[arg(long, env = "HAPTIC_CONFIG_NAME")]
    pub config_name: Option<String>,
    /// Label selector of the HAProxy pods. A pod is deployed to once it is Running with an IP
    /// and its container declaring the Dataplane port is ready (else: its Ready condition).
    #[arg(long, env = "HAPTIC_POD_SELECTOR")]
    pub pod_selector: String,
    /// Dataplane API port (per pod: annotation `haproxy-haptic.org/dataplane-port`).
    #[arg(long, env = "HAPTIC_DATAPLANE_PORT", default_value_t = 5555)]
    pub dataplane_port: u16,
    /// Secret holding the Dataplane API credentials under the keys `username` and `password` (or
    /// upstream HAPTIC's `dataplane_username` and `dataplane_password`); watched, so a rotated
    /// password is used without a restart.
    #[arg(long, env = "HAPTIC_DATAPLANE_SECRET")]
    pub dataplane_secret: String,
    /// Minimum time between the end of one deployment and the start of the next.
    #[arg(long, env = "HAPTIC_MIN_DEPLOYMENT_INTERVAL", value_parser = humantime::parse_duration, default_value = "2s")]
    pub min_deployment_interval: Duration,
    /// Drift prevention interval (a full check of every pod after this long without a deployment).
    #[arg(long, env = "HAPTIC_DRIFT_PREVENTION_INTERVAL", value_parser = humantime::parse_duration, default_value = "60s")]
    pub drift_prevention_interval: Duration,
    /// First retry delay of a quarantined render (a pod's Dataplane API rejected it
    /// permanently), doubling per rejection in a row up to --quarantine-retry-max; default:
    /// the drift prevention interval (upstream retries a rejected render at every drift check).
    #[arg(long, env = "HAPTIC_QUARANTINE_RETRY_INITIAL", value_parser = humantime::parse_duration)]
    pub quarantine_retry_initial: Option<Duration>,
    /// Upper bound of the retry delay of a quarantined render (the pod's status entry shows
    /// the next retry as `nextRetryAt`).
    #[arg(long, env = "HAPTIC_QUARANTINE_RETRY_MAX", value_parser = humantime::parse_duration, default_value = "1h")]
    pub quarantine_retry_max: Duration,
    /// Per-pod deployment history: the most sync records the journal keeps per pod (older ones
    /// are trimmed first; at least 1). The renders the kept records name keep their blobs.
    #[arg(long, env = "HAPTIC_HISTORY_MAX_ENTRIES", default_value_t = 200)]
    pub history_max_entries: u32,
    /// Per-pod deployment history: records that ended longer ago than this are trimmed.
    #[arg(long, env = "HAPTIC_HISTORY_MAX_AGE", value_parser = humantime::parse_duration, default_value = "14days")]
    pub history_max_age: Duration,
    /// A deployment running longer is cancelled and retried.
    #[arg(long, env = "HAPTIC_DEPLOYMENT_TIMEOUT", value_parser = humantime::parse_duration, default_value = "30s")]
    pub deployment_timeout: Duration,
    /// Leading-edge throttle of publications and status writes; 0s = off.
    #[arg(long, env = "HAPTIC_PUBLISH_INTERVAL", value_parser = humantime::parse_duration, default_value = "0s")]
    pub publish_interval: Duration,
    /// First delay of the publisher's retries of a failed Kubernetes write (doubling per
    /// attempt up to --publish-retry-max; retried until it succeeds or is rejected permanently).
    #[arg(long, env = "HAPTIC_PUBLISH_RETRY_INITIAL", value_parser = humantime::parse_duration, default_value = "200ms")]
    pub publish_retry_initial: Duration,
    /// Upper bound of one delay between the publisher's retries (a server's Retry-After is
    /// honoured up to it).
    #[arg(long, env = "HAPTIC_PUBLISH_RETRY_MAX", value_parser = humantime::parse_duration, default_value = "30s")]
    pub publish_retry_max: Duration,
    /// Bound of one `haproxy -c` run.
    #[arg(long, env = "HAPTIC_VALIDATION_TIMEOUT", value_parser = humantime::parse_duration, default_value = "30s")]
    pub validation_timeout: Duration,
    /// Dataplane API requests in flight across one deployment; 0 = unlimited.
    #[arg(long, env = "HAPTIC_MAX_PARALLEL", default_value_t = 0)]
    pub max_parallel: usize,
    /// A configuration change of more operations than this is pushed whole (one raw push)
    /// instead of through fine-grained Dataplane operations; 0 = never by count.
    #[arg(long, env = "HAPTIC_RAW_PUSH_THRESHOLD", default_value_t = 100)]
    pub raw_push_threshold: u32,
    /// Content larger than this many bytes is stored zstd-compressed in the custom resources
    /// (only when shorter); 0 = never compress.
    #[arg(
        long,
        env = "HAPTIC_COMPRESSION_THRESHOLD",
        default_value_t = 1_048_576
    )]
    pub compression_threshold: u64,
    /// Bound of one Kubernetes API request: its answer's headers, and for every request but a
    /// watch the whole answer; a request past it fails and is retried with its caller's
    /// backoff (a watch stream, once open, is bounded by the watcher's idle timeout). A Lease
    /// renew is also cut at --lease-renew-deadline.
    #[arg(long, env = "HAPTIC_KUBE_REQUEST_TIMEOUT", value_parser = humantime::parse_duration, default_value = "10s")]
    pub kube_request_timeout: Duration,
    /// Name of the coordination.k8s.io/v1 Lease used for leader election.
    #[arg(long, env = "HAPTIC_LEASE_NAME", default_value = "haptic-leader")]
    pub lease_name: String,
    /// How long a Lease is valid after its last renew.
    #[arg(long, env = "HAPTIC_LEASE_DURATION", value_parser = humantime::parse_duration, default_value = "15s")]
    pub lease_duration: Duration,
    /// A leader that could not renew for this long gives up.
    #[arg(long, env = "HAPTIC_LEASE_RENEW_DEADLINE", value_parser = humantime::parse_duration, default_value = "10s")]
    pub lease_renew_deadline: Duration,
    /// Interval of acquire and renew attempts.
    #[arg(long, env = "HAPTIC_LEASE_RETRY_PERIOD", value_parser = humantime::parse_duration, default_value = "2s")]
    pub lease_retry_period: Duration,
    /// This replica's identity in the Lease (default: `POD_NAME`, then the hostname).
    #[arg(long, env = "HAPTIC_IDENTITY")]
    pub identity: Option<String>,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "HAPTIC_METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: SocketAddr,
    /// Log format.
    #[arg(long, env = "HAPTIC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The `haproxy` binary used for validation.
    #[arg(long, env = "HAPTIC_HAPROXY_BIN", default_value = "haproxy")]
    pub haproxy_bin: PathBuf,
    /// Bound of the graceful leader stop on SIGTERM (deployer drain, then publisher drain and
    /// the queued per-pod statuses written).
    #[arg(long, env = "HAPTIC_DRAIN_TIMEOUT", value_parser = humantime::parse_duration, default_value = "25s")]
    pub drain_timeout: Duration,
}
