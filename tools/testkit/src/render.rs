//! The corpus renders (`tests/corpus/renders/`) and writing a render into a render directory
//! the way the stable interface of issue 6 says a writer must: auxiliary folders first, then
//! `haproxy.cfg` renamed into place.
//!
//! ```text
//!  for each folder of FOLDERS (maps, ssl, ca, general, crt-lists):
//!      in the render: write each file as `.<name>.tmp`, rename onto `<name>`;
//!                     remove the files the render no longer has
//!      not in it:     remove the folder
//!  then haproxy.cfg:  write `.haproxy.cfg.tmp`, fsync, rename onto `haproxy.cfg`   <- commit point
//! ```
//!
//! The directory source reads a render only after `haproxy.cfg` changed identity and the tree
//! has been quiet for its debounce, and skips hidden names, so the temporary names are never read
//! and a reader never sees a half-written file.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use haptic::core::render::{CONFIG_FILE, FOLDERS, RenderContent};
use haptic_journal::{AuxKind, Checksum};
use haptic_tools::sandbox::pods::demo::{Check, checks_for};

/// The corpus of renders, `tests/corpus/renders/` of the workspace.
pub const RENDERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/corpus/renders");

/// The folder of the corpus render `name`.
#[must_use]
pub fn corpus_dir(name: &str) -> PathBuf {
    Path::new(RENDERS).join(name)
}

/// Every render of the corpus stream (sub-folders of [`RENDERS`] holding `haproxy.cfg`), in
/// name order.
///
/// # Panics
/// When the corpus cannot be read.
#[must_use]
pub fn stream() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(RENDERS)
        .expect("the render corpus")
        .filter_map(Result::ok)
        .filter(|e| e.path().join(CONFIG_FILE).exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}

/// The corpus render `name`, read as the directory source reads it.
///
/// # Panics
/// When it cannot be read.
#[must_use]
pub fn corpus(name: &str) -> RenderContent {
    haptic::source::dir::read_render(&corpus_dir(name))
        .unwrap_or_else(|e| panic!("corpus render {name}: {e}"))
}

/// The render checksum of the corpus render `name`.
#[must_use]
pub fn checksum(name: &str) -> Checksum {
    corpus(name).checksum()
}

/// Whether `tests/corpus/renders/README.md` says `name` must be rejected.
#[must_use]
pub fn rejected(name: &str) -> bool {
    !checks_for(name, &corpus_dir(name)).0
}

/// The requests every pod must answer after `name` (for a rejected render: the last passed
/// one's), as the README lists them.
#[must_use]
pub fn checks(name: &str) -> Vec<Check> {
    checks_for(name, &corpus_dir(name)).1
}

/// The auxiliary files of `render` as the journal's `Batch::put_render` takes them: (kind,
/// render-relative path, content), sorted by path.
#[must_use]
pub fn batch_files(render: &RenderContent) -> Vec<(AuxKind, String, Vec<u8>)> {
    render
        .files
        .iter()
        .map(|f| (f.kind, f.path.clone(), f.content.clone()))
        .collect()
}

/// Writes the corpus render `name` into the render directory `dst` ([`write_render`]).
///
/// # Panics
/// When it cannot be read or written.
pub fn feed(dst: &Path, name: &str) {
    write_render(&corpus(name), dst).unwrap_or_else(|e| panic!("feeding {name}: {e:?}"));
}

/// Writes `render` the way the ConfigMap source's doc says writers should: the Secret `secret`
/// first (the `ssl/` and `ca/` files, keys `<folder>--<name>`), then the ConfigMap `configmap`
/// (`haproxy.cfg` and everything else), each created or replaced whole, in `ns`.
///
/// # Panics
/// When the API server refuses a read or a write.
///
/// # Cancel safety
/// Not cancel safe: cancelled between the two writes, the Secret is new and the ConfigMap old.
pub async fn put_configmap_render(
    client: &kube::Client,
    ns: &str,
    configmap: &str,
    secret: &str,
    render: &RenderContent,
) {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Api, ObjectMeta};
    let mut cm_data = std::collections::BTreeMap::new();
    let mut secret_data = std::collections::BTreeMap::new();
    cm_data.insert(
        CONFIG_FILE.to_owned(),
        String::from_utf8_lossy(&render.config).into_owned(),
    );
    for f in &render.files {
        let key = haptic::source::configmap::path_to_key(&f.path);
        if matches!(f.kind, AuxKind::Ssl | AuxKind::Ca) {
            secret_data.insert(key, ByteString(f.content.clone()));
        } else {
            cm_data.insert(key, String::from_utf8_lossy(&f.content).into_owned());
        }
    }
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        ..ObjectMeta::default()
    };
    let mut s = Secret {
        metadata: meta(secret),
        ..Secret::default()
    };
    s.data = Some(secret_data);
    replace_whole(Api::namespaced(client.clone(), ns), secret, s).await;
    let mut c = ConfigMap {
        metadata: meta(configmap),
        ..ConfigMap::default()
    };
    c.data = Some(cm_data);
    replace_whole(Api::namespaced(client.clone(), ns), configmap, c).await;
}

/// Creates `obj` as `name`, or replaces the stored object whole (its resourceVersion kept).
///
/// # Panics
/// When the API server refuses the read or the write.
async fn replace_whole<K>(api: kube::Api<K>, name: &str, mut obj: K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let pp = kube::api::PostParams::default();
    match api.get_opt(name).await.expect("read the object") {
        Some(old) => {
            obj.meta_mut().resource_version = old.meta().resource_version.clone();
            api.replace(name, &pp, &obj)
                .await
                .expect("replace the object");
        }
        None => {
            api.create(&pp, &obj).await.expect("create the object");
        }
    }
}

/// Temporary name of `haproxy.cfg` while it is written (hidden, so the reader skips it).
const CONFIG_TEMP: &str = ".haproxy.cfg.tmp";

/// One step of [`write_render`], in the order it happened (for tests and progress output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedStep {
    /// An auxiliary file was renamed into place (path relative to the render directory, e.g.
    /// `maps/hosts.map`); files whose content was already there are not rewritten.
    AuxWritten(String),
    /// An auxiliary file the render no longer has was removed (relative path).
    AuxRemoved(String),
    /// A folder the render does not have was removed (folder name, e.g. `ssl`).
    FolderRemoved(String),
    /// `haproxy.cfg` was renamed into place: the render is complete.
    ConfigCommitted,
}

/// Errors writing a render.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// A file or folder of the render directory could not be written, renamed or removed.
    #[error("cannot update {path}")]
    Io {
        /// The path the failed operation was on.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FeedError + '_ {
    move |source| FeedError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `render` into the render directory `dst` (created when absent), replacing the render
/// there: auxiliary folders first (each folder's content replaced, files the render lacks removed,
/// folders it lacks removed), then `haproxy.cfg` written to a hidden temporary name, synced and
/// renamed into place, which is the commit point a reader waits for.
///
/// Entries of `dst` outside `haproxy.cfg` and [`FOLDERS`] are left alone. Returns the steps taken,
/// in order; [`FeedStep::ConfigCommitted`] is always the last one.
///
/// # Errors
/// [`FeedError::Io`] naming the path when a write, rename or removal fails; the previous
/// `haproxy.cfg` then stays in place, so no incomplete render is committed.
pub fn write_render(render: &RenderContent, dst: &Path) -> Result<Vec<FeedStep>, FeedError> {
    let mut steps = Vec::new();
    write_render_observed(render, dst, &mut |s| steps.push(s))?;
    Ok(steps)
}

/// [`write_render`] reporting each step to `observe` right after it happened.
fn write_render_observed(
    render: &RenderContent,
    dst: &Path,
    observe: &mut dyn FnMut(FeedStep),
) -> Result<(), FeedError> {
    std::fs::create_dir_all(dst).map_err(io(dst))?;
    for (folder, _, _) in FOLDERS {
        let prefix = format!("{folder}/");
        let wanted: Vec<(&str, &[u8])> = render
            .files
            .iter()
            .filter_map(|f| {
                f.path
                    .strip_prefix(&prefix)
                    .map(|name| (name, f.content.as_slice()))
            })
            .collect();
        let sub = dst.join(folder);
        if wanted.is_empty() {
            if sub.exists() {
                std::fs::remove_dir_all(&sub).map_err(io(&sub))?;
                observe(FeedStep::FolderRemoved((*folder).to_owned()));
            }
            continue;
        }
        std::fs::create_dir_all(&sub).map_err(io(&sub))?;
        for (name, content) in &wanted {
            let target = sub.join(name);
            if std::fs::read(&target).is_ok_and(|old| old == *content) {
                continue;
            }
            replace_file(&sub, name, content)?;
            observe(FeedStep::AuxWritten(format!("{folder}/{name}")));
        }
        let keep: BTreeSet<&str> = wanted.iter().map(|(n, _)| *n).collect();
        for entry in std::fs::read_dir(&sub).map_err(io(&sub))? {
            let entry = entry.map_err(io(&sub))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if keep.contains(name.as_str()) {
                continue;
            }
            let path = entry.path();
            if entry.file_type().map_err(io(&path))?.is_dir() {
                std::fs::remove_dir_all(&path).map_err(io(&path))?;
            } else {
                std::fs::remove_file(&path).map_err(io(&path))?;
            }
            observe(FeedStep::AuxRemoved(format!("{folder}/{name}")));
        }
    }
    let temp = dst.join(CONFIG_TEMP);
    let mut f = std::fs::File::create(&temp).map_err(io(&temp))?;
    f.write_all(&render.config).map_err(io(&temp))?;
    f.sync_all().map_err(io(&temp))?;
    drop(f);
    let cfg = dst.join(CONFIG_FILE);
    std::fs::rename(&temp, &cfg).map_err(io(&cfg))?;
    observe(FeedStep::ConfigCommitted);
    Ok(())
}

/// Writes `content` to `dir/.<name>.tmp` and renames it onto `dir/<name>`, so a reader sees the
/// old file or the new one, never a partial one.
fn replace_file(dir: &Path, name: &str, content: &[u8]) -> Result<(), FeedError> {
    let temp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temp, content).map_err(io(&temp))?;
    let target = dir.join(name);
    std::fs::rename(&temp, &target).map_err(io(&target))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use haptic::core::render::RenderFile;
    use haptic::source::dir::read_render;

    fn file(kind: AuxKind, path: &str, content: &str) -> RenderFile {
        RenderFile {
            kind,
            path: path.into(),
            content: content.as_bytes().to_vec(),
        }
    }

    fn render(config: &str, files: &[(AuxKind, &str, &str)]) -> RenderContent {
        let files = files.iter().map(|(k, p, c)| file(*k, p, c)).collect();
        RenderContent::new(config.as_bytes().to_vec(), files)
    }

    /// Four files of three kinds.
    fn first() -> RenderContent {
        use AuxKind::{General, Map, Ssl};
        let files = [
            (Map, "maps/a.map", "a 1\n"),
            (Map, "maps/b.map", "b 1\n"),
            (Ssl, "ssl/site.pem", "pem 1\n"),
            (General, "general/403.http", "403\n"),
        ];
        render("config 1\n", &files)
    }

    /// [`first`] with a.map changed, b.map and the certificate gone, a crt-list added.
    fn second() -> RenderContent {
        use AuxKind::{CrtList, General, Map};
        let files = [
            (Map, "maps/a.map", "a 2\n"),
            (General, "general/403.http", "403\n"),
            (CrtList, "crt-lists/sites.crtlist", "site\n"),
        ];
        render("config 2\n", &files)
    }

    /// Every entry under `dir`, relative, sorted (hidden ones included).
    fn tree(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                out.extend(tree(&e.path()).into_iter().map(|n| format!("{name}/{n}")));
            } else {
                out.push(name);
            }
        }
        out.sort();
        out
    }

    #[test]
    fn writes_a_render_the_reader_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("render");
        let steps = write_render(&first(), &dst).unwrap();
        assert_eq!(steps.last(), Some(&FeedStep::ConfigCommitted));
        assert_eq!(read_render(&dst).unwrap(), first());
        assert_eq!(
            tree(&dst),
            [
                "general/403.http",
                "haproxy.cfg",
                "maps/a.map",
                "maps/b.map",
                "ssl/site.pem"
            ]
        );
    }

    #[test]
    fn replaces_folder_contents_and_removes_what_the_render_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("render");
        write_render(&first(), &dst).unwrap();
        std::fs::write(dst.join("unrelated.txt"), "kept").unwrap();
        let steps = write_render(&second(), &dst).unwrap();
        assert_eq!(read_render(&dst).unwrap(), second());
        assert_eq!(read_render(&dst).unwrap().checksum(), second().checksum());
        // no temporary names left, b.map and ssl/ gone, the unchanged 403 page not rewritten,
        // entries outside the render layout untouched
        assert_eq!(
            tree(&dst),
            [
                "crt-lists/sites.crtlist",
                "general/403.http",
                "haproxy.cfg",
                "maps/a.map",
                "unrelated.txt"
            ]
        );
        assert_eq!(
            steps,
            [
                FeedStep::AuxWritten("maps/a.map".into()),
                FeedStep::AuxRemoved("maps/b.map".into()),
                FeedStep::FolderRemoved("ssl".into()),
                FeedStep::AuxWritten("crt-lists/sites.crtlist".into()),
                FeedStep::ConfigCommitted,
            ]
        );
    }

    #[test]
    fn auxiliary_files_are_in_place_before_the_config_is_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("render");
        write_render(&first(), &dst).unwrap();
        let next = second();
        let mut seen = Vec::new();
        write_render_observed(&next, &dst, &mut |step| {
            let cfg = std::fs::read_to_string(dst.join(CONFIG_FILE)).unwrap();
            if step == FeedStep::ConfigCommitted {
                // at the commit point the whole new render is there, and nothing else
                assert_eq!(read_render(&dst).unwrap(), next);
            } else {
                // before it, the reader's commit point still names the previous render
                assert_eq!(cfg, "config 1\n", "config replaced before {step:?}");
            }
            seen.push(step);
        })
        .unwrap();
        assert_eq!(seen.last(), Some(&FeedStep::ConfigCommitted));
        assert_eq!(
            seen.iter()
                .filter(|s| **s == FeedStep::ConfigCommitted)
                .count(),
            1
        );
    }

    #[test]
    fn the_config_is_a_new_file_each_time() {
        // The directory source notices a commit by the identity of haproxy.cfg (inode, mtime,
        // size): a rename gives it a new inode even when the size stays the same.
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("render");
        write_render(&render("config A\n", &[]), &dst).unwrap();
        let before = std::fs::metadata(dst.join(CONFIG_FILE)).unwrap().ino();
        write_render(&render("config B\n", &[]), &dst).unwrap();
        let after = std::fs::metadata(dst.join(CONFIG_FILE)).unwrap().ino();
        assert_ne!(before, after);
        assert_eq!(tree(&dst), ["haproxy.cfg"]);
    }

    #[test]
    fn a_failed_write_leaves_the_previous_config_committed() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("render");
        write_render(&first(), &dst).unwrap();
        // a file where the maps folder should be makes the folder write fail
        std::fs::remove_dir_all(dst.join("maps")).unwrap();
        std::fs::write(dst.join("maps"), "not a folder").unwrap();
        let err = write_render(&second(), &dst).unwrap_err();
        assert!(matches!(err, FeedError::Io { .. }), "{err:?}");
        assert_eq!(
            std::fs::read_to_string(dst.join(CONFIG_FILE)).unwrap(),
            "config 1\n"
        );
    }
}
