//! `haptic::source::dir` against a temp dir: atomic rename flow, writes in progress, unchanged
//! content, ConfigMap-volume `..data` swaps.

use std::path::Path;
use std::time::Duration;

use haptic::core::render::RenderContent;
use haptic::dispatch::input::Input;
use haptic::source::dir::read_render;
use haptic::source::dir::{DirSource, DirSourceConfig};
use haptic_journal::Event;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

struct Running {
    rx: mpsc::Receiver<Input>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

const POLL: Duration = Duration::from_millis(40);

fn start(dir: &Path) -> Running {
    start_with(dir, Duration::from_millis(150))
}

fn start_with(dir: &Path, debounce: Duration) -> Running {
    let (tx, rx) = mpsc::channel(8);
    let cancel = CancellationToken::new();
    let mut config = DirSourceConfig::new(dir);
    config.poll_interval = POLL;
    config.debounce = debounce;
    let c = cancel.clone();
    let task = tokio::spawn(async move {
        DirSource::new(config).run(tx, c).await.unwrap();
    });
    Running { rx, cancel, task }
}

async fn next(r: &mut Running, within: Duration) -> Option<(Event, RenderContent)> {
    match tokio::time::timeout(within, r.rx.recv()).await {
        Ok(Some(Input::Rendered { event, content, .. })) => Some((event, (*content).clone())),
        Ok(other) => panic!("unexpected {other:?}"),
        Err(_) => None,
    }
}

/// Writes `haproxy.cfg` the way a render writer must: to a temp name, then renamed into place.
fn commit_config(dir: &Path, text: &str) {
    let tmp = dir.join(".haproxy.cfg.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join("haproxy.cfg")).unwrap();
}

const LONG: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(800);

#[tokio::test]
async fn atomic_rename_flow_and_unchanged_content() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut r = start(dir);
    assert!(
        next(&mut r, QUIET).await.is_none(),
        "no haproxy.cfg, no render"
    );

    std::fs::create_dir(dir.join("maps")).unwrap();
    std::fs::write(dir.join("maps/hosts.map"), "shop.haptic.test shop-v1\n").unwrap();
    assert!(
        next(&mut r, QUIET).await.is_none(),
        "aux files alone are not a render"
    );
    commit_config(dir, "global\n");
    let (event, content) = next(&mut r, LONG).await.expect("render after the rename");
    assert_eq!(content, read_render(dir).unwrap());
    assert_eq!(content.files.len(), 1);
    let Event::TemplateRendered {
        render,
        auxiliary_file_count,
        config_bytes,
        ..
    } = event
    else {
        panic!("{event:?}")
    };
    assert_eq!(render, content.checksum());
    assert_eq!((auxiliary_file_count, config_bytes), (1, 7));

    // A write in progress (a map changed, haproxy.cfg not renamed yet) is not read.
    std::fs::write(dir.join("maps/hosts.map"), "shop.haptic.test shop-v2\n").unwrap();
    std::fs::write(dir.join("maps/new.map"), "half").unwrap();
    assert!(next(&mut r, QUIET).await.is_none(), "read half-done");
    commit_config(dir, "global\n");
    let (_, content) = next(&mut r, LONG)
        .await
        .expect("render after the second rename");
    assert_eq!(content.files.len(), 2);
    assert_eq!(content.files[0].content, b"shop.haptic.test shop-v2\n");

    // Renaming in identical content yields no new render.
    commit_config(dir, "global\n");
    assert!(
        next(&mut r, QUIET).await.is_none(),
        "unchanged render sent again"
    );
}

#[tokio::test]
async fn existing_render_is_sent_at_startup_and_writes_during_debounce_coalesce() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    commit_config(dir, "global\n");
    let mut r = start(dir);
    let (event, _) = next(&mut r, LONG).await.expect("startup render");
    let Event::TemplateRendered { trigger_reason, .. } = event else {
        panic!()
    };
    assert_eq!(trigger_reason, "startup");

    // Two commits in quick succession: only the last is read.
    commit_config(dir, "global\n# one\n");
    tokio::time::sleep(Duration::from_millis(30)).await;
    commit_config(dir, "global\n# two\n");
    let (_, content) = next(&mut r, LONG).await.expect("render");
    assert_eq!(content.config, b"global\n# two\n");
    assert!(next(&mut r, QUIET).await.is_none());
}

#[tokio::test]
async fn configmap_volume_data_swap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let write_version = |name: &str, cfg: &str, map: &str| {
        let v = dir.join(name);
        std::fs::create_dir_all(v.join("maps")).unwrap();
        std::fs::write(v.join("haproxy.cfg"), cfg).unwrap();
        std::fs::write(v.join("maps/hosts.map"), map).unwrap();
        let link = dir.join("..data_tmp");
        std::os::unix::fs::symlink(name, &link).unwrap();
        std::fs::rename(&link, dir.join("..data")).unwrap();
    };
    write_version("..v1", "global\n", "a 1\n");
    std::os::unix::fs::symlink("..data/haproxy.cfg", dir.join("haproxy.cfg")).unwrap();
    std::os::unix::fs::symlink("..data/maps", dir.join("maps")).unwrap();
    let mut r = start(dir);
    let (_, content) = next(&mut r, LONG).await.expect("startup render");
    assert_eq!(content.files[0].content, b"a 1\n");

    write_version("..v2", "global\n", "a 2\n");
    let (_, content) = next(&mut r, LONG).await.expect("render after the swap");
    assert_eq!(content.files[0].content, b"a 2\n");
    assert_eq!(content.files[0].path, "maps/hosts.map");
}

/// Bad render directories (issue 13, "Bad input"): a symlink loop, a dangling symlink, a file
/// name that is not UTF-8: the read fails with an error naming the file and the fix, and the
/// source sends nothing until the directory is fixed; then the fixed render is sent. Names with
/// spaces, several dots and Unicode are read as they are.
#[tokio::test]
async fn a_bad_render_directory_names_the_file_and_sends_nothing_until_fixed() {
    use std::os::unix::ffi::OsStrExt as _;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("maps")).unwrap();
    std::fs::write(dir.join("maps/my hosts.v2.map"), "a b\n").unwrap();
    std::fs::write(dir.join("maps/hôtes-日本.map"), "c d\n").unwrap();
    commit_config(dir, "global\n");
    let r = read_render(dir).unwrap();
    let mut paths: Vec<&str> = r.files.iter().map(|f| f.path.as_str()).collect();
    paths.sort_unstable();
    assert_eq!(paths, ["maps/hôtes-日本.map", "maps/my hosts.v2.map"]);

    let link = dir.join("maps/loop.map");
    std::os::unix::fs::symlink(&link, &link).unwrap();
    let e = read_render(dir).unwrap_err().to_string();
    assert!(e.contains("loop.map") && e.contains("symlink loop"), "{e}");
    std::fs::remove_file(&link).unwrap();

    std::os::unix::fs::symlink(dir.join("maps/absent"), &link).unwrap();
    let e = read_render(dir).unwrap_err().to_string();
    assert!(
        e.contains("loop.map") && e.contains("dangling symlink"),
        "{e}"
    );
    std::fs::remove_file(&link).unwrap();

    let bad = dir
        .join("maps")
        .join(std::ffi::OsStr::from_bytes(b"bad-\xff.map"));
    std::fs::write(&bad, "x y\n").unwrap();
    let e = read_render(dir).unwrap_err().to_string();
    assert!(e.contains("not UTF-8") && e.contains("rename"), "{e}");

    // The source sends nothing while the directory is bad, then the fixed render.
    let mut running = start(dir);
    assert!(
        next(&mut running, QUIET).await.is_none(),
        "a bad render is not sent"
    );
    std::fs::remove_file(&bad).unwrap();
    let (_, content) = next(&mut running, LONG).await.expect("the fixed render");
    assert_eq!(content.files.len(), 2);
}

/// Writers an operator really uses do not all put the folders first: default `rsync -a` (a temp
/// file and a rename per file) and `kubectl cp` (tar, in lexical order) rename `haproxy.cfg` in
/// before `maps/` is written. The tree is read only once it has been quiet for the debounce, so
/// the render read is the new config with its new map (found by a newcomer's check of a change
/// that read a renamed `haproxy.cfg` at the next poll: it read the old map, and never the new).
/// The writes are 2 polls apart, the debounce is 25 polls.
#[tokio::test]
async fn haproxy_cfg_renamed_in_before_its_map_is_read_with_the_map() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("maps")).unwrap();
    std::fs::write(dir.join("maps/hosts.map"), "a v1\n").unwrap();
    commit_config(dir, "global\n# v1\n");
    let mut r = start_with(dir, POLL * 25);
    let (_, c) = next(&mut r, LONG).await.expect("startup render");
    assert_eq!(c.config, b"global\n# v1\n");

    commit_config(dir, "global\n# v2\n");
    tokio::time::sleep(POLL * 2).await;
    let t = dir.join("maps/.hosts.map.XXXXXX");
    std::fs::write(&t, "a v2\n").unwrap();
    std::fs::rename(&t, dir.join("maps/hosts.map")).unwrap();

    let mut seen = Vec::new();
    while let Some((_, c)) = next(&mut r, POLL * 50).await {
        seen.push((
            String::from_utf8_lossy(&c.config).into_owned(),
            String::from_utf8_lossy(&c.files[0].content).into_owned(),
        ));
    }
    assert_eq!(
        seen,
        vec![("global\n# v2\n".to_owned(), "a v2\n".to_owned())],
        "renders read after the rsync-style write"
    );
}

/// An editor's save (emacs' default, vim with `backupcopy=no`: the old file renamed away, a new
/// one created and then written) or `kubectl cp` onto tmpfs puts a new inode at `haproxy.cfg`
/// and fills it afterwards: the half-written file is never read.
#[tokio::test]
async fn a_new_haproxy_cfg_filled_after_creation_is_not_read_half_written() {
    use std::io::Write as _;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    commit_config(dir, "global\n# v1\n");
    let mut r = start_with(dir, POLL * 25);
    next(&mut r, LONG).await.expect("startup render");

    std::fs::rename(dir.join("haproxy.cfg"), dir.join("haproxy.cfg~")).unwrap();
    let mut f = std::fs::File::create(dir.join("haproxy.cfg")).unwrap();
    f.write_all(b"global\n").unwrap();
    tokio::time::sleep(POLL * 2).await;
    f.write_all(b"# v2: the rest of the file\n").unwrap();
    drop(f);

    let mut seen = Vec::new();
    while let Some((_, c)) = next(&mut r, POLL * 50).await {
        seen.push(String::from_utf8_lossy(&c.config).into_owned());
    }
    assert_eq!(
        seen,
        vec!["global\n# v2: the rest of the file\n".to_owned()],
        "renders read after an editor-style save"
    );
}

/// A writer that follows the protocol and commits renders back to back (the next render's map
/// written right after the last `haproxy.cfg` rename): no render that mixes two commits is read,
/// and the last one read is the last committed.
#[tokio::test]
async fn back_to_back_commits_never_read_a_mix_of_two_renders() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let put_map = |text: &str| {
        let t = dir.join("maps/.hosts.map.tmp");
        std::fs::write(&t, text).unwrap();
        std::fs::rename(&t, dir.join("maps/hosts.map")).unwrap();
    };
    std::fs::create_dir(dir.join("maps")).unwrap();
    put_map("a v1\n");
    commit_config(dir, "global\n# v1\n");
    let mut r = start_with(dir, POLL * 25);
    next(&mut r, LONG).await.expect("startup render");

    put_map("a v2\n");
    commit_config(dir, "global\n# v2\n");
    put_map("a v3\n");
    tokio::time::sleep(POLL * 2).await;
    commit_config(dir, "global\n# v3\n");

    let mut seen = Vec::new();
    while let Some((_, c)) = next(&mut r, POLL * 50).await {
        seen.push((
            String::from_utf8_lossy(&c.config).into_owned(),
            String::from_utf8_lossy(&c.files[0].content).into_owned(),
        ));
    }
    for (cfg, map) in &seen {
        assert_eq!(
            cfg.replace("global\n# ", "a "),
            *map,
            "a render mixing two commits was read: {seen:?}"
        );
    }
    assert_eq!(seen.last().map(|s| s.0.as_str()), Some("global\n# v3\n"));
}
