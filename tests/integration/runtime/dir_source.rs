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
const DEBOUNCE: Duration = Duration::from_millis(150);

fn start(dir: &Path) -> Running {
    start_with(dir, DEBOUNCE)
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
async fn existing_render_is_sent_at_startup_and_in_place_writes_coalesce() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    commit_config(dir, "global\n");
    let mut r = start(dir);
    let (event, _) = next(&mut r, LONG).await.expect("startup render");
    let Event::TemplateRendered { trigger_reason, .. } = event else {
        panic!()
    };
    assert_eq!(trigger_reason, "startup");

    // haproxy.cfg rewritten in place (same inode), several times well inside the debounce: a
    // write in progress, read once it has been quiet for the debounce, so only the last text.
    let cfg = dir.join("haproxy.cfg");
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let ino = inode(&cfg);
    for i in 0..6 {
        std::fs::write(&cfg, format!("global\n# partial {i}\n")).unwrap();
        tokio::time::sleep(DEBOUNCE / 6).await;
    }
    std::fs::write(&cfg, "global\n# two\n").unwrap();
    assert_eq!(inode(&cfg), ino, "the rewrite kept the inode");
    let (_, content) = next(&mut r, LONG).await.expect("render");
    assert_eq!(content.config, b"global\n# two\n");
    assert!(next(&mut r, QUIET).await.is_none());

    // Two renames in quick succession: the last is read, and nothing after it.
    commit_config(dir, "global\n# three\n");
    tokio::time::sleep(Duration::from_millis(5)).await;
    commit_config(dir, "global\n# four\n");
    let mut last = None;
    while let Some((_, content)) = next(&mut r, QUIET).await {
        last = Some(content.config);
    }
    assert_eq!(last.as_deref(), Some(&b"global\n# four\n"[..]));
}

/// A render committed by renaming `haproxy.cfg` into place (or swapping `..data`) is complete by
/// the writer's word (DESIGN.md, "Render directory"): it is read at the next poll, not after the
/// debounce, which is only for `haproxy.cfg` rewritten in place. With a 10 s debounce, both
/// renders must arrive well before it (half of it) could have elapsed once.
#[tokio::test]
async fn a_commit_by_rename_or_data_swap_is_read_without_the_debounce() {
    let long_debounce = Duration::from_secs(10);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut r = start_with(dir, long_debounce);
    // Let the source look at the empty directory first: what is there at its start is debounced.
    assert!(next(&mut r, POLL * 3).await.is_none());
    commit_config(dir, "global\n");
    let (_, content) = next(&mut r, long_debounce / 2)
        .await
        .expect("render committed by rename, read before the debounce");
    assert_eq!(content.config, b"global\n");

    let vdir = tempfile::tempdir().unwrap();
    let vol = vdir.path();
    let swap = |name: &str, cfg: &str| {
        std::fs::create_dir_all(vol.join(name)).unwrap();
        std::fs::write(vol.join(name).join("haproxy.cfg"), cfg).unwrap();
        let link = vol.join("..data_tmp");
        std::os::unix::fs::symlink(name, &link).unwrap();
        std::fs::rename(&link, vol.join("..data")).unwrap();
    };
    swap("..v1", "global\n# v1\n");
    std::os::unix::fs::symlink("..data/haproxy.cfg", vol.join("haproxy.cfg")).unwrap();
    let mut v = start_with(vol, long_debounce);
    // At start the render is debounced (a writer may be mid-write).
    let (_, content) = next(&mut v, long_debounce * 2)
        .await
        .expect("startup render");
    assert_eq!(content.config, b"global\n# v1\n");
    swap("..v2", "global\n# v2\n");
    let (_, content) = next(&mut v, long_debounce / 2)
        .await
        .expect("render committed by a ..data swap, read before the debounce");
    assert_eq!(content.config, b"global\n# v2\n");
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
