//! [`JournalOptions`]: how [`Journal::open`](super::Journal::open) opens the file.

use std::path::PathBuf;

use redb::{Builder, ConcurrencyMode};

/// Commit durability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit is fsynced before `accept` returns (J1). The default and the only mode the
    /// controller may use.
    #[default]
    Immediate,
    /// No fsync: commits are lost on power failure. Tests and benchmarks only; refused in
    /// single-writer mode.
    None,
}

/// How processes may share the file (redb's `ConcurrencyMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Concurrency {
    /// One process has the file; anyone else (even a read-only inspector) gets
    /// [`OpenError::InUse`](crate::OpenError::InUse). One fsync per commit. The default.
    #[default]
    Exclusive,
    /// One writer process plus any number of read-only processes (opened in this mode too) that
    /// follow its commits, e.g. `haptic-journalctl` in a live pod. Every commit is two-phase (two
    /// fsyncs) and `Durability::None` is refused. Needs byte-range locks (no NFS).
    SingleWriter,
}

/// Builder setters, `name: Type;` each after its doc comment: `fn name(mut self, v: Type) -> Self`
/// sets the field of the same name.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, value: $ty) -> Self {
                self.$name = value;
                self
            }
        )*
    };
}

/// Options of [`Journal::open`](super::Journal::open).
#[derive(Clone, Debug)]
pub struct JournalOptions {
    /// The journal file.
    pub path: PathBuf,
    /// Create the file (mode 0600) when missing. Ignored read-only. Default: true.
    pub create: bool,
    /// Open read-only: no writer thread, every write returns
    /// [`AcceptError::ReadOnly`](crate::AcceptError::ReadOnly).
    /// Default: false.
    pub read_only: bool,
    /// Commit durability. Default: [`Durability::Immediate`].
    pub durability: Durability,
    /// Process sharing mode. Default: [`Concurrency::Exclusive`].
    pub concurrency: Concurrency,
    /// Run [`Journal::verify`](super::Journal::verify) during open and fail with
    /// [`OpenError::Corrupt`](crate::OpenError::Corrupt) on any problem (J10). Default: true.
    pub verify_on_open: bool,
    /// Most requests that share one commit. Range 1..; default 1024.
    pub max_group_requests: usize,
    /// Trim events every this many commits (0: only on
    /// [`Journal::trim`](super::Journal::trim)). Default: 64.
    pub trim_every_commits: u32,
    /// redb page cache size in bytes. Default: 64 MiB.
    pub cache_size_bytes: usize,
    /// After each periodic trim and when the journal closes, compact (in the writer thread,
    /// between commits) when the file is larger than twice the bytes of the pages redb holds
    /// ([`Journal::held_bytes`](super::Journal::held_bytes)) plus
    /// [`Self::auto_compact_slack_bytes`] (J6).
    /// Default: true.
    pub auto_compact: bool,
    /// The slack of [`Self::auto_compact`]. Default: 8 MiB.
    pub auto_compact_slack_bytes: u64,
    /// With [`Self::auto_compact`]: compact after every periodic trim, whatever the sizes
    /// (tests that must reach compaction). Default: false.
    pub auto_compact_always: bool,
}

impl JournalOptions {
    /// Defaults for `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JournalOptions {
            path: path.into(),
            create: true,
            read_only: false,
            durability: Durability::Immediate,
            concurrency: Concurrency::Exclusive,
            verify_on_open: true,
            max_group_requests: 1024,
            trim_every_commits: 64,
            cache_size_bytes: 64 * 1024 * 1024,
            auto_compact: true,
            auto_compact_slack_bytes: 8 * 1024 * 1024,
            auto_compact_always: false,
        }
    }

    setters! {
        /// Sets [`Self::read_only`].
        read_only: bool;
        /// Sets [`Self::create`].
        create: bool;
        /// Sets [`Self::durability`].
        durability: Durability;
        /// Sets [`Self::concurrency`].
        concurrency: Concurrency;
        /// Sets [`Self::verify_on_open`].
        verify_on_open: bool;
        /// Sets [`Self::trim_every_commits`].
        trim_every_commits: u32;
        /// Sets [`Self::auto_compact_slack_bytes`].
        auto_compact_slack_bytes: u64;
        /// Sets [`Self::auto_compact_always`].
        auto_compact_always: bool;
        /// Sets [`Self::auto_compact`].
        auto_compact: bool;
    }

    /// Sets [`Self::max_group_requests`] (at least 1).
    #[must_use]
    pub fn max_group_requests(mut self, n: usize) -> Self {
        self.max_group_requests = n.max(1);
        self
    }

    pub(super) fn builder(&self) -> Builder {
        let mut b = Builder::new();
        b.set_cache_size(self.cache_size_bytes);
        b.set_concurrency_mode(match self.concurrency {
            Concurrency::Exclusive => ConcurrencyMode::ExclusiveWriter,
            Concurrency::SingleWriter => ConcurrencyMode::SingleWriter,
        });
        b
    }
}
