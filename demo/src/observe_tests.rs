#![allow(clippy::unwrap_used)]

use haptic::source::dir::read_render;
use haptic_journal::Checksum;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::*;
use haptic::k8s::crd::{HAProxyCfgSpec, HAProxyCfgStatus, PodDeploymentStatus};

const NAMES: Names<'static> = Names {
    main: "demo-haproxycfg",
    invalid: "demo-haproxycfg-invalid",
};

fn sum(b: u8) -> Checksum {
    Checksum([b; 32])
}

fn case(valid: bool, checksum: Checksum) -> RenderCase {
    RenderCase {
        name: if valid { "01-basic" } else { "08-invalid" }.into(),
        content: RenderContent::default(),
        checksum,
        valid,
        checks: Vec::new(),
    }
}

fn cond(type_: &str, status: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: "R".into(),
        message: String::new(),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

fn cfg(
    name: &str,
    checksum: Checksum,
    on: &[Checksum],
    validated: &str,
    pinned: &str,
) -> HAProxyCfg {
    let mut c = HAProxyCfg::new(
        name,
        HAProxyCfgSpec {
            path: "/etc/haproxy/haproxy.cfg".into(),
            content: String::new(),
            checksum,
            compressed: false,
        },
    );
    c.status = Some(HAProxyCfgStatus {
        deployed_to_pods: on
            .iter()
            .enumerate()
            .map(|(i, s)| PodDeploymentStatus {
                pod_name: format!("haproxy-{i}"),
                checksum: Some(*s),
                ..PodDeploymentStatus::default()
            })
            .collect(),
        conditions: vec![
            cond(conditions::CONFIG_VALIDATED, validated),
            cond(conditions::CONFIG_PINNED, pinned),
        ],
        ..HAProxyCfgStatus::default()
    });
    c
}

fn pods(ok: &[bool]) -> Vec<PodAnswers> {
    ok.iter()
        .enumerate()
        .map(|(i, ok)| PodAnswers {
            pod: format!("haproxy-{i}"),
            answers: vec![Answer {
                what: "GET /".into(),
                got: if *ok { "want" } else { "old" }.into(),
                expected: "want".into(),
                ok: *ok,
            }],
        })
        .collect()
}

#[test]
fn an_applied_render_converges_when_pods_objects_and_status_agree() {
    let c = case(true, sum(1));
    let obs = Observation {
        main: Some(cfg(NAMES.main, sum(1), &[sum(1); 3], "True", "False")),
        invalid: None,
        pods: pods(&[true, true, true]),
    };
    assert_eq!(shortfalls(&c, None, 3, NAMES, &obs), Vec::<String>::new());
}

#[test]
fn an_applied_render_names_each_thing_still_behind() {
    let c = case(true, sum(2));
    let mut obs = Observation {
        main: None,
        invalid: None,
        pods: pods(&[true, false, true]),
    };
    let s = shortfalls(&c, Some(&sum(1)), 3, NAMES, &obs);
    assert_eq!(
        s,
        [
            "HAProxyCfg demo-haproxycfg is not published",
            "haproxy-1: GET / answered \"old\", expected \"want\""
        ]
    );
    obs.main = Some(cfg(NAMES.main, sum(1), &[sum(1); 3], "True", "False"));
    let s = shortfalls(&c, Some(&sum(1)), 3, NAMES, &obs);
    assert!(
        s[0].starts_with("HAProxyCfg demo-haproxycfg holds sha256:0101"),
        "{s:?}"
    );
    obs.main = Some(cfg(
        NAMES.main,
        sum(2),
        &[sum(2), sum(1), sum(2)],
        "True",
        "True",
    ));
    obs.invalid = Some(cfg(NAMES.invalid, sum(9), &[], "False", "True"));
    obs.pods = pods(&[true, true, true]);
    let s = shortfalls(&c, Some(&sum(1)), 3, NAMES, &obs);
    assert_eq!(
        s,
        [
            "HAProxyCfg demo-haproxycfg ConfigPinned is True, not False",
            "HAProxyCfg demo-haproxycfg status: 2/3 pods on this render",
            "HAProxyCfg demo-haproxycfg-invalid still exists",
        ]
    );
}

#[test]
fn a_rejected_render_needs_its_invalid_object_and_the_fleet_pinned() {
    let last = sum(7);
    let c = case(false, sum(8));
    let mut obs = Observation {
        main: Some(cfg(NAMES.main, last, &[last; 3], "True", "False")),
        invalid: None,
        pods: pods(&[true, true, true]),
    };
    let s = shortfalls(&c, Some(&last), 3, NAMES, &obs);
    assert_eq!(
        s,
        [
            "HAProxyCfg demo-haproxycfg ConfigValidated is True, not False",
            "HAProxyCfg demo-haproxycfg ConfigPinned is False, not True",
            "HAProxyCfg demo-haproxycfg-invalid is not published",
        ]
    );
    // the -invalid object of the previous rejected render is not this one's
    obs.main = Some(cfg(NAMES.main, last, &[last; 3], "False", "True"));
    obs.invalid = Some(cfg(NAMES.invalid, sum(9), &[], "False", "True"));
    let s = shortfalls(&c, Some(&last), 3, NAMES, &obs);
    assert_eq!(s.len(), 1, "{s:?}");
    assert!(s[0].contains("not this render's"), "{s:?}");
    obs.invalid = Some(cfg(NAMES.invalid, sum(8), &[], "False", "True"));
    assert!(shortfalls(&c, Some(&last), 3, NAMES, &obs).is_empty());
    // the main object must stay on the last applied render
    obs.main = Some(cfg(NAMES.main, sum(8), &[last; 3], "False", "True"));
    assert_eq!(shortfalls(&c, Some(&last), 3, NAMES, &obs).len(), 1);
}

#[test]
fn the_stream_loads_in_name_order_with_its_expectations() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/renders");
    let stream = load_stream(&dir).unwrap();
    let names: Vec<&str> = stream.iter().map(|c| c.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert_eq!(names.first(), Some(&"01-basic"));
    for c in &stream {
        assert_eq!(
            c.valid,
            !matches!(c.name.as_str(), "08-invalid" | "09-missing-map")
        );
        assert!(!c.checks.is_empty(), "{} has no checks", c.name);
        assert_eq!(
            c.checksum,
            read_render(&dir.join(&c.name)).unwrap().checksum()
        );
    }
}

#[test]
fn an_empty_stream_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        load_stream(dir.path()),
        Err(DemoError::NoRenders { .. })
    ));
    assert!(matches!(
        load_stream(&dir.path().join("absent")),
        Err(DemoError::Renders { .. })
    ));
}
