//! The directory render source: a render directory watched by polling, debounced, read whole and
//! only when stable (DESIGN.md section 1, "Render directory").
//!
//! ```text
//!  every poll_interval: commit stamp = (..data symlink target, haproxy.cfg inode/mtime/size)
//!     changed? -> wait until the whole tree's fingerprint is unchanged for `debounce`
//!     -> fingerprint F1, read everything, fingerprint F2; F1 != F2 -> read again
//!     -> checksum differs from the last emitted render? -> Input::Rendered
//! ```
//!
//! A render is complete when `haproxy.cfg` is renamed into place (writers put auxiliary files
//! first) or, for a ConfigMap/Secret volume, when the `..data` symlink is swapped. Changes to
//! auxiliary files alone are a write in progress and are not read until the commit point moves.
//! Polling (not inotify) is deliberate: it works the same on volume mounts, overlay file systems
//! and NFS, and a render directory has tens of entries, so a 200 ms poll costs nothing.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::core::render::{CONFIG_FILE, FOLDERS, RenderContent, RenderFile};
use crate::dispatch::input::{InputSender, RenderSource, SinkClosed, send_render};

/// Settings of a [`DirSource`].
#[derive(Debug, Clone)]
pub struct DirSourceConfig {
    /// The render directory.
    pub dir: PathBuf,
    /// How often the directory is looked at. Default: 200 ms.
    pub poll_interval: Duration,
    /// How long the tree must stay unchanged after a commit before it is read. Default: 500 ms.
    pub debounce: Duration,
}

impl DirSourceConfig {
    /// The defaults for `dir`.
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirSourceConfig {
            dir: dir.into(),
            poll_interval: Duration::from_millis(200),
            debounce: Duration::from_millis(500),
        }
    }
}

/// Errors that end [`DirSource::run`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirSourceError {
    /// The dispatcher's channel closed.
    #[error(transparent)]
    SinkClosed(#[from] SinkClosed),
}

/// A watched render directory.
#[derive(Debug)]
pub struct DirSource {
    config: DirSourceConfig,
    /// Checksum of the last render sent; an unchanged render is not sent again.
    last_sent: Option<haptic_journal::Checksum>,
    /// The last read error logged (one warning per distinct error; cleared by a good read).
    last_error: std::sync::Mutex<Option<String>>,
}

/// Metadata of one entry: (relative path, inode, mtime ns, size).
type Entry = (String, u64, i128, u64);

impl DirSource {
    /// A source over `config.dir`.
    #[must_use]
    pub fn new(config: DirSourceConfig) -> Self {
        DirSource {
            config,
            last_sent: None,
            last_error: std::sync::Mutex::new(None),
        }
    }

    /// Tells the source which render was last journaled (e.g. after a restart), so an unchanged
    /// directory does not produce it again.
    pub fn set_last_sent(&mut self, checksum: haptic_journal::Checksum) {
        self.last_sent = Some(checksum);
    }

    /// Watches the directory until `cancel` fires, sending every new complete render.
    ///
    /// The render present at start (if any) is sent with trigger `startup` unless its checksum
    /// equals [`DirSource::set_last_sent`]; later ones with trigger `directory_changed`. Read
    /// errors (a missing `haproxy.cfg`, a file vanishing mid-read) are logged and retried on the
    /// next poll.
    ///
    /// # Errors
    /// [`DirSourceError::SinkClosed`] when the receiver is gone.
    ///
    /// # Cancel safety
    /// Cancel safe; cancelling through `cancel` ends it between polls.
    pub async fn run(
        mut self,
        sink: InputSender,
        cancel: CancellationToken,
    ) -> Result<(), DirSourceError> {
        let mut committed = None;
        let mut trigger = "startup";
        // Warn once per absence (a mistyped --render-dir is otherwise silent), again after a
        // render was seen and haproxy.cfg vanished.
        let mut warned_missing = false;
        loop {
            let stamp = commit_stamp(&self.config.dir);
            if stamp.is_none() && !warned_missing {
                warned_missing = true;
                let dir = &self.config.dir;
                if dir.is_dir() {
                    tracing::warn!(dir = %dir.display(),
                        "render directory has no haproxy.cfg yet: write the auxiliary folders, then rename haproxy.cfg into place");
                } else {
                    tracing::warn!(dir = %dir.display(),
                        "render directory does not exist: check --render-dir; waiting for it to appear");
                }
            } else if stamp.is_some() {
                warned_missing = false;
            }
            if stamp.is_some() && stamp != committed {
                match self.read_stable(&cancel).await {
                    Some((content, took)) => {
                        committed = stamp;
                        // Every content hashed once: the unchanged check, the event and the
                        // journal's blob keys.
                        let manifest = content.manifest();
                        let checksum = manifest.checksum;
                        if self.last_sent != Some(checksum) {
                            send_render(&sink, content, manifest, took, trigger, RenderSource::Dir)
                                .await?;
                            self.last_sent = Some(checksum);
                            tracing::info!(render = %checksum, "render read from directory");
                        }
                        trigger = "directory_changed";
                    }
                    None if cancel.is_cancelled() => return Ok(()),
                    None => {}
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                () = tokio::time::sleep(self.config.poll_interval) => {}
            }
        }
    }

    /// Waits for the tree to be quiet for `debounce`, then reads it whole, again if it changed
    /// meanwhile. `None` when cancelled or on a read error (logged).
    async fn read_stable(&self, cancel: &CancellationToken) -> Option<(RenderContent, Duration)> {
        let dir = self.config.dir.clone();
        let mut last = fingerprint(&dir);
        let mut quiet_since = Instant::now();
        loop {
            if quiet_since.elapsed() >= self.config.debounce {
                let dir2 = dir.clone();
                let started = Instant::now();
                let read = tokio::task::spawn_blocking(move || {
                    let before = fingerprint(&dir2);
                    let content = read_render(&dir2);
                    (before, content, fingerprint(&dir2))
                })
                .await;
                match read {
                    Ok((before, Ok(content), after)) if before == after && after == last => {
                        *self
                            .last_error
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                        return Some((content, started.elapsed()));
                    }
                    Ok((_, Ok(_), after)) => {
                        // Something changed while reading: wait for quiet again.
                        last = after;
                        quiet_since = Instant::now();
                    }
                    Ok((_, Err(error), _)) => {
                        // Once per distinct error: the read is tried again every poll.
                        let text = error.to_string();
                        let mut last = self
                            .last_error
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if last.as_deref() != Some(text.as_str()) {
                            tracing::warn!(error = %text, dir = %dir.display(),
                                "render directory unreadable; the last render read stays in effect");
                            *last = Some(text);
                        }
                        return None;
                    }
                    Err(error) => {
                        tracing::warn!(error = %error, "render read task failed");
                        return None;
                    }
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = tokio::time::sleep(self.config.poll_interval.min(self.config.debounce)) => {}
            }
            let now = fingerprint(&dir);
            if now != last {
                last = now;
                quiet_since = Instant::now();
            }
        }
    }
}

/// What marks a render as complete: the `..data` target of a volume, else `haproxy.cfg`'s
/// identity. `None` when there is no `haproxy.cfg`.
fn commit_stamp(dir: &Path) -> Option<(Option<PathBuf>, Entry)> {
    let data = std::fs::read_link(dir.join("..data")).ok();
    let cfg = entry(dir, CONFIG_FILE)?;
    Some((data, cfg))
}

fn entry(dir: &Path, rel: &str) -> Option<Entry> {
    let m = std::fs::metadata(dir.join(rel)).ok()?;
    let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    Some((rel.to_owned(), m.ino(), mtime, m.size()))
}

/// Metadata of every file a render reads, sorted, plus the `..data` target.
fn fingerprint(dir: &Path) -> (Option<PathBuf>, Vec<Entry>) {
    let mut out: Vec<Entry> = entry(dir, CONFIG_FILE).into_iter().collect();
    for (folder, _, _) in FOLDERS {
        let Ok(rd) = std::fs::read_dir(dir.join(folder)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') {
                out.extend(entry(dir, &format!("{folder}/{name}")));
            }
        }
    }
    out.sort();
    (std::fs::read_link(dir.join("..data")).ok(), out)
}
/// Reads a render directory (`haproxy.cfg` plus the folders of [`FOLDERS`](crate::core::render::FOLDERS)) as it is now.
///
/// Hidden entries (names starting with `.`, such as a volume's `..data`) are skipped inside
/// folders; subdirectories of a folder and unknown top-level entries are ignored.
///
/// # Errors
/// Any I/O error, e.g. [`std::io::ErrorKind::NotFound`] when `haproxy.cfg` is absent.
pub fn read_render(dir: &Path) -> std::io::Result<RenderContent> {
    let config_path = dir.join(CONFIG_FILE);
    let config = std::fs::read(&config_path).map_err(|e| named(&config_path, e))?;
    let mut files = Vec::new();
    for (folder, kind, _) in FOLDERS {
        let sub = dir.join(folder);
        let entries = match std::fs::read_dir(&sub) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(named(&sub, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| named(&sub, e))?;
            let path = entry.path();
            let Ok(name) = entry.file_name().into_string() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{}: the file name is not UTF-8; rename it (a render's file names are \
                         written to Kubernetes objects and to the pods as UTF-8)",
                        path.display()
                    ),
                ));
            };
            if name.starts_with('.') {
                continue;
            }
            // `metadata` follows symlinks (volume files are symlinks into `..data`).
            let meta = std::fs::metadata(&path).map_err(|e| named(&path, e))?;
            if !meta.is_file() {
                continue;
            }
            files.push(RenderFile {
                kind: *kind,
                path: format!("{folder}/{name}"),
                content: std::fs::read(&path).map_err(|e| named(&path, e))?,
            });
        }
    }
    Ok(RenderContent::new(config, files))
}

/// `e` with the path it happened on and what to do: a render read error names its file.
fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    let fix = match e.raw_os_error() {
        Some(40) => "a symlink loop: fix or remove the link",
        Some(13) => "not readable by the controller: fix its permissions",
        Some(2) => {
            "a dangling symlink or a file removed while reading: fix the link or write the render again"
        }
        _ => "fix the file or write the render again",
    };
    std::io::Error::new(e.kind(), format!("{}: {e}; {fix}", path.display()))
}
