//! `haptic::validate` against the real `haproxy` on the render corpus.

use std::path::{Path, PathBuf};
use std::time::Duration;

use haptic::core::render::RenderContent;
use haptic::source::dir::read_render;
use haptic::validate::{Outcome, Validator, ValidatorError};

fn renders() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/renders")
}

fn shared_corpus() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/corpus/haproxy"
    ))
    .to_path_buf()
}

async fn validator() -> Validator {
    Validator::new("haproxy", Duration::from_secs(20))
        .await
        .unwrap()
}

fn config_only(path: &Path) -> RenderContent {
    RenderContent::new(std::fs::read(path).unwrap(), Vec::new())
}

#[tokio::test]
async fn every_corpus_render_gets_its_verdict() {
    let v = validator().await;
    for entry in std::fs::read_dir(renders()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let render = read_render(&dir).unwrap();
        let outcome = v.validate(&render).await.unwrap().outcome;
        match name.as_str() {
            "08-invalid" => {
                let Outcome::Fail { errors } = &outcome else {
                    panic!("{name} passed")
                };
                assert!(errors[0].contains("no-such-directive"), "{errors:?}");
                assert!(errors[0].contains("haproxy.cfg:13"), "{errors:?}");
                assert!(
                    errors.last().unwrap().contains("Fatal errors"),
                    "{errors:?}"
                );
            }
            "09-missing-map" => {
                let Outcome::Fail { errors } = &outcome else {
                    panic!("{name} passed")
                };
                assert!(
                    errors[0].contains("/etc/haproxy/maps/absent.map"),
                    "{errors:?}"
                );
            }
            _ => assert!(outcome.passed(), "{name}: {outcome:?}"),
        }
    }
}

#[tokio::test]
async fn shared_corpus_configs() {
    let v = validator().await;
    let one = config_only(&shared_corpus().join("basic/one-backend.cfg"));
    assert!(v.validate(&one).await.unwrap().outcome.passed());
    for (dir, file) in [
        ("acme", "with-letsencrypt.cfg"),
        ("enterprise/waf-global", "with-global.cfg"),
        ("enterprise/botmgmt-profile", "one-profile.cfg"),
        ("enterprise/captcha", "one-captcha.cfg"),
    ] {
        let render = config_only(&shared_corpus().join(dir).join(file));
        let Outcome::Fail { errors } = v.validate(&render).await.unwrap().outcome else {
            panic!("{dir}/{file} passed")
        };
        assert!(
            errors.iter().any(|e| e.contains("unknown keyword")),
            "{dir}/{file}: {errors:?}"
        );
    }
}

#[tokio::test]
async fn empty_render_fails() {
    let v = validator().await;
    for cfg in [&b""[..], b"\n# only a comment\n"] {
        let Outcome::Fail { errors } = v
            .validate(&RenderContent::new(cfg.to_vec(), Vec::new()))
            .await
            .unwrap()
            .outcome
        else {
            panic!("empty render passed")
        };
        assert!(errors[0].contains("empty render"), "{errors:?}");
    }
}

#[tokio::test]
async fn renamed_certificate_fails_naming_the_file() {
    let v = validator().await;
    let mut render = read_render(&renders().join("05-tls")).unwrap();
    render.files[0].path = "ssl/site.example.pem".to_owned();
    let Outcome::Fail { errors } = v.validate(&render).await.unwrap().outcome else {
        panic!("passed")
    };
    assert!(errors[0].contains("ssl/site.example.pem"), "{errors:?}");
}

#[tokio::test]
async fn timeout_fails_the_render() {
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow-haproxy");
    std::fs::write(
        &slow,
        "#!/bin/sh\n[ \"$1\" = -v ] && { echo 'HAProxy version fake'; exit 0; }\nsleep 30\n",
    )
    .unwrap();
    let mut perm = std::fs::metadata(&slow).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&slow, perm).unwrap();
    let v = Validator::new(&slow, Duration::from_millis(300))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let render = read_render(&renders().join("01-basic")).unwrap();
    let Outcome::Fail { errors } = v.validate(&render).await.unwrap().outcome else {
        panic!("passed")
    };
    assert!(
        errors[0].contains("validation timeout of 300ms"),
        "{errors:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn missing_haproxy_is_a_clear_startup_error() {
    let err = Validator::new("/nonexistent/haproxy", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, ValidatorError::HaproxyMissing { .. }));
    assert!(err.to_string().contains("apt-get install haproxy"), "{err}");
}

#[tokio::test]
async fn pass_with_warnings_in_order() {
    let v = validator().await;
    let cfg = "defaults\n    mode http\nfrontend f\n    bind :8080\n    default_backend b\n\
               backend b\n    server s 127.0.0.1:1\n";
    let Outcome::Pass { warnings } = v
        .validate(&RenderContent::new(cfg.as_bytes().to_vec(), Vec::new()))
        .await
        .unwrap()
        .outcome
    else {
        panic!("failed")
    };
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].starts_with("config : missing timeouts for frontend 'f'."));
    assert!(warnings[0].contains("\n   | While not properly invalid"));
    assert!(warnings[1].contains("backend 'b'"));
}

#[tokio::test]
async fn crt_list_paths_are_rewritten_and_messages_name_pod_paths() {
    // 06 passes only if the crt-list's /etc/haproxy/ssl/site.pem is rewritten too; break the
    // certificate to see HAProxy's message name the pod path, not the temp dir.
    let v = validator().await;
    let mut render = read_render(&renders().join("06-crtlist")).unwrap();
    let cert = render
        .files
        .iter_mut()
        .find(|f| f.path == "ssl/site.pem")
        .unwrap();
    cert.content = b"not a certificate\n".to_vec();
    let Outcome::Fail { errors } = v.validate(&render).await.unwrap().outcome else {
        panic!("passed")
    };
    let all = errors.join("\n");
    assert!(all.contains("/etc/haproxy/ssl/site.pem"), "{all}");
    assert!(!all.contains("haptic-validate-"), "{all}");
}
